// Bad input to the readers, in process: from fixed seeds, a few hundred mutated inputs each for
// the safetensors reader (the HF fixture's model.safetensors: flipped bits, truncations, the
// header-length field, header JSON edits of dtype / shape / offsets / fields, huge and negative
// numbers, non-JSON; and the same file as our writer writes it, with checksums, which must never
// load other values, whole or in parts), the token-file reader (header fields, truncation, odd lengths, then reads
// of what loads), the YAML config loader and the flag parser (random keys, values, types,
// nesting, huge numbers). Each must return or throw a typed st::Error — never another exception,
// a signal, an abort or a hang (fuzz_harness.h). The failing cases are listed by name.
#include <gtest/gtest.h>

#include <csignal>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "launch/commands.h"
#include "launch/config.h"
#include "runtime/data/token_data.h"
#include "runtime/io/safetensors.h"
#include "tests/fuzz/fuzz_harness.h"

namespace st::fuzz {
namespace {

using json = nlohmann::ordered_json;

struct Failures {
  std::vector<std::string> list;
  int cases = 0, accepted = 0;  // accepted: loaded without an error (a mutation the format allows)
  void add(const std::string& name, const CaseResult& r) {
    ++cases;
    if (!r.escaped.empty()) list.push_back(name + ": " + r.escaped);
    if (r.escaped.empty() && !r.rejected) ++accepted;
  }
  std::string str() const {
    std::string s;
    for (const auto& f : list) s += "  " + f + "\n";
    return s;
  }
};

Bytes le64(uint64_t v) {
  Bytes b(8, '\0');
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return b;
}
uint64_t header_len(const Bytes& f) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(f[i]);
  return n;
}

json random_json_value(Mutator& m, int depth = 0) {
  switch (m.range(0, depth > 3 ? 4 : 7)) {
    case 0: return m.interesting_int();
    case 1: return static_cast<uint64_t>(m.next());
    case 2: return m.pick(std::vector<double>{1.5, -0.0, 1e308, -1e308, 3.0});
    case 3: return m.pick(std::vector<std::string>{"", "F32", "I64", "BF16", "x", "\xff\xfe", std::string(300, 'a')});
    case 4: return nullptr;
    case 5: {
      json a = json::array();
      for (int i = 0, n = static_cast<int>(m.range(0, 4)); i < n; ++i) a.push_back(random_json_value(m, depth + 1));
      return a;
    }
    case 6: {
      json o = json::object();
      for (int i = 0, n = static_cast<int>(m.range(0, 3)); i < n; ++i)
        o[m.pick(std::vector<std::string>{"dtype", "shape", "data_offsets", "k", ""})] = random_json_value(m, depth + 1);
      return o;
    }
    default: return m.coin();
  }
}

// One header edit of a parsed safetensors header.
void edit_header(Mutator& m, json& h) {
  std::vector<std::string> names;
  for (auto& [k, v] : h.items())
    if (k != "__metadata__") names.push_back(k);
  const std::string name = m.pick(names);
  json& e = h[name];
  if (!e.is_object()) {  // an earlier edit replaced the entry: replace it again
    e = random_json_value(m);
    return;
  }
  switch (m.range(0, 11)) {
    case 0: e["dtype"] = m.pick(std::vector<json>{"F64", "U8", "I32", "F16", "BOOL", "F8_E4M3", "", 3, nullptr}); break;
    case 1: e["shape"] = json::array({m.interesting_int()}); break;
    case 2: e["shape"] = json::array({m.interesting_int(), m.interesting_int()}); break;
    case 3: e["shape"] = random_json_value(m); break;
    case 4: e["data_offsets"] = json::array({m.interesting_int(), m.interesting_int()}); break;
    case 5: {  // an offset moved by a few bytes (the original entry's offsets are small)
      json& o = e["data_offsets"];
      if (o.is_array() && o.size() == 2 && o[0].is_number_unsigned()) o[m.range(0, 1)] = o[0].get<int64_t>() + m.range(-64, 64);
      break;
    }
    case 6: e["data_offsets"] = random_json_value(m); break;
    case 7: e.erase(m.pick(std::vector<std::string>{"dtype", "shape", "data_offsets"})); break;
    case 8: e[m.pick(std::vector<std::string>{"extra", "dtype2"})] = random_json_value(m); break;
    case 9: h["__metadata__"] = random_json_value(m); break;
    case 10: h[name + (m.coin() ? "" : "x")] = random_json_value(m); break;
    default: {  // swap the offsets of two entries
      json& o = h[m.pick(names)];
      if (o.is_object()) std::swap(e["data_offsets"], o["data_offsets"]);
    }
  }
}

TEST(FuzzReaders, Safetensors) {
  const Bytes orig = read_file(std::string(ST_FIXTURE_DIR) + "/model.safetensors");
  const uint64_t n = header_len(orig);
  const Bytes header = orig.substr(8, n), data = orig.substr(8 + n);
  const std::string path = temp_path("fuzz.safetensors");
  Mutator m(20261202);
  Failures f;
  for (int i = 0; i < 400; ++i) {
    Bytes b = orig;
    std::string kind;
    switch (i % 8) {
      case 0: kind = "flip"; m.flip_bits(b, 0, b.size(), 8); break;
      case 1: kind = "flip-header"; m.flip_bits(b, 0, 8 + n, 4); break;
      case 2: kind = "truncate"; b = m.truncate(orig); break;
      case 3: kind = "header-length"; b = le64(static_cast<uint64_t>(m.interesting_int())) + orig.substr(8); break;
      case 4:
      case 5: {
        kind = "header-edit";
        json h = json::parse(header);
        for (int k = 0, e = static_cast<int>(m.range(1, 3)); k < e; ++k) edit_header(m, h);
        const Bytes hs = h.dump(-1, ' ', false, json::error_handler_t::ignore);  // bad UTF-8 left out
        b = le64(hs.size()) + hs + data;
        break;
      }
      case 6: {
        kind = "non-json";
        Bytes hs = header;
        const int what = static_cast<int>(m.range(0, 4));
        if (what == 0) hs = hs.substr(0, static_cast<size_t>(m.range(1, static_cast<int64_t>(hs.size()) - 1)));
        if (what == 1) m.set_random_bytes(hs, 0, hs.size(), 16);
        if (what == 2) hs = "{" + std::string(static_cast<size_t>(m.range(1, 200000)), '[');  // deep nesting
        if (what == 3) hs = "[" + hs + "]";
        if (what == 4) hs = "{\"a\": 1e999999, \"b\": -123456789012345678901234567890}";
        b = le64(hs.size()) + hs + data;
        break;
      }
      default: kind = "tail"; b = orig + Bytes(static_cast<size_t>(m.range(1, 9)), '\0'); break;
    }
    write_file(path, b);
    const std::string name = "safetensors #" + std::to_string(i) + " (" + kind + ")";
    f.add(name, run_case(name, [&] {
      runtime::SafetensorsFile s = runtime::read_safetensors(path);
      for (auto& [k, t] : s.tensors) ASSERT_GE(t.numel(), 0) << k;
    }));
  }
  std::remove(path.c_str());
  EXPECT_EQ(f.cases, 400);
  std::cout << f.accepted << " of " << f.cases << " mutated files loaded, the rest were rejected with a typed error\n";
  EXPECT_TRUE(f.list.empty()) << f.list.size() << " inputs escaped as untyped errors:\n" << f.str();
}

// The same mutations of a file our writer wrote (the fixture's tensors, with every chunk, entry
// and the header checksummed: runtime/io/safetensors_checksums.h), read whole and in parts (a
// row range, a column slice, a window of elements, as tp and ZeRO-3 read): each read must throw
// a typed error or give exactly the original's values — a mutated file never loads other numbers.
TEST(FuzzReaders, ChecksummedSafetensorsNeverLoadOtherValues) {
  const std::string path = temp_path("fuzz_checked.safetensors");
  const runtime::SafetensorsFile fixture = runtime::read_safetensors(std::string(ST_FIXTURE_DIR) + "/model.safetensors");
  runtime::save_safetensors(path, fixture.tensors, fixture.metadata);
  const Bytes orig = read_file(path);
  const uint64_t n = header_len(orig);
  const Bytes header = orig.substr(8, n), data = orig.substr(8 + n);
  std::map<std::string, Tensor> want;
  for (const auto& [name, t] : fixture.tensors) want.emplace(name, t);
  Mutator m(20261205);
  Failures f;
  int wrong = 0, loaded = 0;
  for (int i = 0; i < 400; ++i) {
    Bytes b = orig;
    std::string kind;
    switch (i % 5) {
      case 0: kind = "flip-data"; m.flip_bits(b, 8 + n, b.size(), 3); break;
      case 1: kind = "flip-header"; m.flip_bits(b, 8, 8 + n, 2); break;
      case 2: kind = "truncate"; b = m.truncate(orig); break;
      default: {
        kind = "header-edit";
        json h = json::parse(header);
        for (int k = 0, e = static_cast<int>(m.range(1, 2)); k < e; ++k) edit_header(m, h);
        Bytes hs = h.dump(-1, ' ', false, json::error_handler_t::ignore);
        hs.append((8 - hs.size() % 8) % 8, ' ');
        b = le64(hs.size()) + hs + data;
      }
    }
    write_file(path, b);
    const std::string name = "checked #" + std::to_string(i) + " (" + kind + ")";
    f.add(name, run_case(name, [&] {
      runtime::SafetensorsReader r(path);
      for (const auto& e : r.entries()) {
        auto it = want.find(e.name);
        const auto same = [&](const Tensor& got, const Tensor& ref) {
          if (it == want.end() || got.to_double() != ref.to_double()) ++wrong;
        };
        if (it == want.end()) {
          ++wrong;
          continue;
        }
        const Tensor& ref = it->second;
        ++loaded;
        same(r.read(e.name), ref);
        if (ref.dim() == 2) {
          same(r.read_ranges(e.name, 1, {{1, ref.size(1) / 2}}), ref.narrow(1, 1, ref.size(1) / 2).contiguous());
          same(r.read_ranges(e.name, 0, {{0, 1}}), ref.narrow(0, 0, 1).contiguous());
        }
        const int64_t k = std::min<int64_t>(ref.numel(), 37);
        same(r.read_runs(e.name, {{ref.numel() - k, 0, k}}, k), ref.flatten().narrow(0, ref.numel() - k, k).contiguous());
      }
    }));
  }
  std::remove(path.c_str());
  std::cout << loaded << " tensors of " << f.cases << " mutated files read back; " << f.cases - f.accepted
            << " files rejected\n";
  EXPECT_EQ(wrong, 0) << "a mutated file with checksums loaded other values";
  EXPECT_TRUE(f.list.empty()) << f.list.size() << " inputs escaped as untyped errors:\n" << f.str();
}

TEST(FuzzReaders, TokenFiles) {
  const std::string good = temp_path("good.bin"), path = temp_path("fuzz.bin");
  std::vector<uint16_t> toks(1000);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<uint16_t>((i * 37) % 300);
  runtime::write_token_file(good, toks);
  const Bytes orig = read_file(good);
  Mutator m(7);
  Failures f;
  for (int i = 0; i < 300; ++i) {
    Bytes b = orig;
    std::string kind;
    auto set_int = [&](int index, int64_t v) {
      const int32_t x = static_cast<int32_t>(v);
      std::memcpy(b.data() + 4 * index, &x, 4);
    };
    switch (i % 6) {
      case 0: kind = "magic/version"; set_int(static_cast<int>(m.range(0, 1)), m.interesting_int()); break;
      case 1: kind = "count"; set_int(2, m.interesting_int()); break;
      case 2: kind = "truncate"; b = m.truncate(orig); break;
      case 3: kind = "odd-length"; b.resize(b.size() + static_cast<size_t>(m.range(-3, 3) | 1)); break;
      case 4: kind = "flip-header"; m.flip_bits(b, 0, 1024, 6); break;
      default: kind = "reserved-fields"; set_int(static_cast<int>(m.range(3, 255)), m.interesting_int()); break;
    }
    write_file(path, b);
    const std::string name = "tokens #" + std::to_string(i) + " (" + kind + ")";
    f.add(name, run_case(name, [&] {
      runtime::TokenData td(path);
      td.max_token();
      const int64_t T = m.range(1, 2000);
      if (td.num_sequences(T) > 0) {
        runtime::TokenBatch batch = td.read(m.range(0, 1ll << 40), m.range(1, 4), T);
        ASSERT_EQ(batch.inputs.size(1), T);
      }
    }));
  }
  std::remove(path.c_str());
  std::remove(good.c_str());
  std::cout << f.accepted << " of " << f.cases << " mutated token files loaded and read\n";
  EXPECT_TRUE(f.list.empty()) << f.list.size() << " inputs escaped as untyped errors:\n" << f.str();
}

// A random YAML scalar, sequence, mapping or odd construct.
std::string random_yaml_value(Mutator& m, int depth) {
  switch (m.range(0, depth > 4 ? 6 : 10)) {
    case 0: return std::to_string(m.interesting_int());
    case 1: return m.pick(std::vector<std::string>{"1e309", "-1e309", ".inf", ".nan", "-.inf", "0x10", "1_000", "1e-400",
                                                    "99999999999999999999999", "-0", "+3", "017"});
    case 2: return m.pick(std::vector<std::string>{"true", "no", "off", "~", "null", "''", "\"\"", "\"a\\tb\"", "yes"});
    case 3: return m.pick(std::vector<std::string>{"gpt", "mlp", "fp16", "cosine", "gpipe", "/nonexistent", "x"});
    case 4: return "\"" + std::string(static_cast<size_t>(m.range(0, 5000)), 'z') + "\"";
    case 5: return m.pick(std::vector<std::string>{"!!binary aGVsbG8=", "!!float 3", "!custom 1", "*undefined_alias",
                                                    "&a 1", "|\n  text", ">\n  folded"});
    case 6: {  // deep flow nesting
      const size_t d = static_cast<size_t>(m.range(1, m.coin(0.2) ? 100000 : 50));
      return m.coin() ? std::string(d, '[') + std::string(d, ']') : std::string(d, '{') + std::string(d, '}');
    }
    case 7: return "[" + random_yaml_value(m, depth + 1) + ", " + random_yaml_value(m, depth + 1) + "]";
    case 8: return "{a: " + random_yaml_value(m, depth + 1) + "}";
    case 9: return "\"\\x" + std::to_string(m.range(0, 99)) + "\"";
    default: return std::string(1, static_cast<char>(m.range(1, 255)));
  }
}

TEST(FuzzReaders, YamlConfigsAndFlags) {
  runtime::TrainConfig defaults;
  std::vector<std::string> keys;
  const launch::OptionTable table = launch::train_options(defaults);
  for (const auto& s : table.specs()) keys.push_back(s.name);
  keys.insert(keys.end(), {"config", "d_model", "", "lr lr", "- item", "? complex", "<<", "steps:", "\t"});
  const std::string path = temp_path("fuzz.yaml");
  Mutator m(42);
  Failures f;
  // found by a 10x campaign: a path longer than the file system's NAME_MAX made std::filesystem
  // throw its own filesystem_error out of the option checks
  const std::string long_name = "/tmp/" + std::string(5000, 'z');
  for (const char* key : {"data", "val-data", "init-from"}) {
    const std::string name = std::string("long --") + key;
    f.add(name, run_case(name, [&] { launch::parse_train_args({std::string("--") + key, long_name}); }));
  }
  f.add("long sample --checkpoint", run_case("long sample --checkpoint", [&] {
          launch::parse_sample_args({"--checkpoint", long_name}, nullptr);
        }));
  for (int i = 0; i < 300; ++i) {
    std::string doc;
    switch (i % 5) {
      case 0:  // raw bytes
        doc = Bytes(static_cast<size_t>(m.range(0, 200)), ' ');
        m.set_random_bytes(doc, 0, doc.size(), static_cast<int>(doc.size()));
        break;
      case 1:  // a deep block mapping
        for (int d = 0, n = static_cast<int>(m.range(1, 3000)); d < n; ++d) doc += std::string(d, ' ') + "k:\n";
        break;
      default:
        for (int k = 0, n = static_cast<int>(m.range(1, 12)); k < n; ++k)
          doc += m.pick(keys) + ": " + random_yaml_value(m, 0) + "\n";
        if (m.coin(0.1)) doc += "---\nsecond: doc\n";
    }
    write_file(path, doc);
    const std::string name = "yaml #" + std::to_string(i);
    f.add(name, run_case(name, [&] { launch::parse_train_args({"--config", path}); }));
  }
  for (int i = 0; i < 200; ++i) {  // the same values as flags
    std::vector<std::string> args;
    for (int k = 0, n = static_cast<int>(m.range(0, 8)); k < n; ++k) {
      args.push_back(m.coin(0.9) ? "--" + m.pick(keys) : m.pick(keys));
      if (m.coin(0.8)) args.push_back(random_yaml_value(m, 5));
      if (m.coin(0.1)) args.back() = "--" + m.pick(keys) + "=" + random_yaml_value(m, 5);
    }
    const std::string name = "flags #" + std::to_string(i);
    f.add(name, run_case(name, [&] { launch::parse_train_args(args); }));
  }
  std::remove(path.c_str());
  EXPECT_EQ(f.cases, 504);
  std::cout << f.accepted << " of " << f.cases << " configs / flag lists parsed and validated\n";
  EXPECT_TRUE(f.list.empty()) << f.list.size() << " inputs escaped as untyped errors:\n" << f.str();
}

// The harness itself: a typed error passes, another exception is reported, a signal and a hang
// end the binary naming the case.
TEST(FuzzHarness, TellsTypedErrorsFromEscapesSignalsAndHangs) {
  EXPECT_TRUE(run_case("typed", [] { throw IOError("bad file"); }).rejected);
  EXPECT_EQ(run_case("typed", [] { throw IOError("bad file"); }).escaped, "");
  EXPECT_NE(run_case("untyped", [] { throw std::length_error("vector"); }).escaped.find("vector"), std::string::npos);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(run_case("segv", [] { std::raise(SIGSEGV); }), "fuzz: case 'segv' died on a signal");
  EXPECT_DEATH(run_case("abort", [] { std::abort(); }), "fuzz: case 'abort' aborted");
  EXPECT_EXIT(run_case("hang", [] { std::this_thread::sleep_for(std::chrono::seconds(30)); },
                       std::chrono::milliseconds(300)),
              testing::ExitedWithCode(3), "fuzz: case 'hang' ran past its deadline");
}

}  // namespace
}  // namespace st::fuzz
