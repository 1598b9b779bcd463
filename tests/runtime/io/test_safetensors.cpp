// safetensors: round trip of every writable dtype, the HF fixture written by save_pretrained,
// and one IOError per kind of corruption (each message must name the file and the problem).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/io/safetensors.h"
#include "runtime/io/safetensors_index.h"

using namespace st;
using namespace st::runtime;
namespace fs = std::filesystem;

namespace {

std::string temp_file(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("st_safetensors_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return (d / name).string();
}

// Writes an 8-byte LE length, the header text and `data_bytes` zero bytes.
std::string write_raw(const std::string& name, const std::string& header, size_t data_bytes, int64_t len_override = -1) {
  std::string path = temp_file(name);
  std::ofstream o(path, std::ios::binary);
  uint64_t len = len_override >= 0 ? static_cast<uint64_t>(len_override) : header.size();
  for (int i = 0; i < 8; ++i) o.put(static_cast<char>((len >> (8 * i)) & 0xff));
  o << header;
  o << std::string(data_bytes, '\0');
  return path;
}

// Expects IOError whose message contains the path and `needle`.
void expect_io_error(const std::string& path, const std::string& needle) {
  try {
    read_safetensors(path);
    FAIL() << "no error for " << path;
  } catch (const IOError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find(needle), std::string::npos) << "expected '" << needle << "' in: " << m;
  }
}

}  // namespace

TEST(Safetensors, RoundTripAllDTypes) {
  std::vector<double> vals = {1.5, -2.25, 3.0, 0.0, 0.125, -7.0};  // exact in bf16
  NamedTensors in = {
      {"a.f32", Tensor::from_vector(vals, {2, 3}, DType::f32)},
      {"b.f16", Tensor::from_vector(vals, {3, 2}, DType::f16)},
      {"c.bf16", Tensor::from_vector(vals, {6}, DType::bf16)},
      {"d.i32", Tensor::from_vector(std::vector<int32_t>{1, -2, 3, 2147483647}, {4})},
      {"e.i64", Tensor::from_vector(std::vector<int64_t>{int64_t(1) << 40, -5}, {2, 1})},
      {"f.scalar", Tensor::from_vector(std::vector<float>{42.f}, {})},
      {"g.empty", Tensor::empty({0, 4}, DType::f32)},
      {"h.transposed", Tensor::from_vector(vals, {2, 3}).transpose(0, 1)},  // non-contiguous view
  };
  std::string path = temp_file("roundtrip.safetensors");
  save_safetensors(path, in, {{"format", "pt"}, {"step", "7"}});
  SafetensorsFile out = read_safetensors(path);
  ASSERT_EQ(out.tensors.size(), in.size());
  EXPECT_EQ(out.metadata.at("format"), "pt");
  EXPECT_EQ(out.metadata.at("step"), "7");
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out.tensors[i].first, in[i].first);  // written order is kept
    const Tensor& a = in[i].second;
    const Tensor& b = out.tensors[i].second;
    EXPECT_EQ(b.dtype(), a.dtype()) << in[i].first;
    EXPECT_EQ(b.shape(), a.shape()) << in[i].first;
    EXPECT_EQ(b.to_double(), a.to_double()) << in[i].first;  // bit-exact values
  }
  // The transposed view was written in its logical (3, 2) order.
  auto t = load_safetensors(path).at("h.transposed").to_double();
  EXPECT_EQ(t, (std::vector<double>{1.5, 0.0, -2.25, 0.125, 3.0, -7.0}));
  // The data starts 8-byte aligned (the header is padded).
  std::ifstream f(path, std::ios::binary);
  uint64_t len = 0;
  f.read(reinterpret_cast<char*>(&len), 8);
  EXPECT_EQ(len % 8, 0u);
}

TEST(Safetensors, ReadsHuggingFaceFixture) {
  const std::string dir = ST_FIXTURE_DIR;
  SafetensorsFile f = read_safetensors(dir + "/model.safetensors");
  EXPECT_EQ(f.metadata.at("format"), "pt");
  std::map<std::string, Tensor> m;
  for (auto& [n, t] : f.tensors) m.emplace(n, t);
  ASSERT_TRUE(m.count("transformer.h.0.attn.c_attn.weight"));
  EXPECT_EQ(m.at("transformer.h.0.attn.c_attn.weight").shape(), (Shape{64, 192}));  // Conv1D (in, out)
  EXPECT_EQ(m.at("transformer.h.0.attn.c_attn.bias").shape(), (Shape{192}));
  EXPECT_EQ(m.at("transformer.h.1.mlp.c_fc.weight").shape(), (Shape{64, 256}));
  EXPECT_EQ(m.at("transformer.wte.weight").shape(), (Shape{256, 64}));
  EXPECT_EQ(m.at("transformer.wpe.weight").shape(), (Shape{32, 64}));
  EXPECT_EQ(m.at("transformer.ln_f.weight").dtype(), DType::f32);
  // Initialised by HF: LayerNorm weights are ones, biases zeros, wte has std ≈ 0.02.
  for (double v : m.at("transformer.ln_f.weight").to_double()) ASSERT_EQ(v, 1.0);
  for (double v : m.at("transformer.h.0.attn.c_attn.bias").to_double()) ASSERT_EQ(v, 0.0);
  auto w = m.at("transformer.wte.weight").to_double();
  double s2 = 0;
  for (double v : w) s2 += v * v;
  EXPECT_NEAR(std::sqrt(s2 / w.size()), 0.02, 0.002);
  // Total bytes: every parameter of a 2-layer, C=64, V=256, T=32 GPT-2 (lm_head tied, not stored).
  int64_t numel = 0;
  for (auto& [n, t] : f.tensors) numel += t.numel();
  const int64_t C = 64, V = 256, P = 32, L = 2;
  EXPECT_EQ(numel, V * C + P * C + L * (2 * C + C * 3 * C + 3 * C + C * C + C + 2 * C + C * 4 * C + 4 * C + 4 * C * C + C) + 2 * C);

  auto logits = load_safetensors(dir + "/logits0.safetensors").at("logits");
  EXPECT_EQ(logits.shape(), (Shape{4, 32, 256}));
}

TEST(Safetensors, RewritesFixtureIdentically) {
  const std::string dir = ST_FIXTURE_DIR;
  SafetensorsFile f = read_safetensors(dir + "/model.safetensors");
  std::string path = temp_file("rewrite.safetensors");
  save_safetensors(path, f.tensors, f.metadata);
  SafetensorsFile g = read_safetensors(path);
  ASSERT_EQ(g.tensors.size(), f.tensors.size());
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    EXPECT_EQ(g.tensors[i].first, f.tensors[i].first);
    EXPECT_EQ(g.tensors[i].second.to_double(), f.tensors[i].second.to_double());
  }
}

TEST(Safetensors, ReadOnlyF64AndU8) {
  double d[2] = {0.5, -3.25};
  std::string header = R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},"b":{"dtype":"U8","shape":[3],"data_offsets":[16,19]}})";
  std::string path = temp_file("f64u8.safetensors");
  {
    std::ofstream o(path, std::ios::binary);
    uint64_t len = header.size();
    o.write(reinterpret_cast<const char*>(&len), 8);
    o << header;
    o.write(reinterpret_cast<const char*>(d), 16);
    o.put(char(0)).put(char(200)).put(char(255));
  }
  auto m = load_safetensors(path);
  EXPECT_EQ(m.at("a").dtype(), DType::f32);
  EXPECT_EQ(m.at("a").to_double(), (std::vector<double>{0.5, -3.25}));
  EXPECT_EQ(m.at("b").dtype(), DType::i32);
  EXPECT_EQ(m.at("b").to_double(), (std::vector<double>{0, 200, 255}));
}

TEST(Safetensors, CorruptFilesAreIOErrors) {
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  // sanity: the well-formed variant reads
  EXPECT_EQ(load_safetensors(write_raw("ok.st", ok, 16)).at("w").numel(), 4);

  expect_io_error(temp_file("missing.st"), "cannot open");
  {
    std::string p = temp_file("tiny.st");
    std::ofstream(p) << "abc";
    expect_io_error(p, "shorter than the 8-byte header length");
  }
  expect_io_error(write_raw("trunc_data.st", ok, 10), "run past the end");             // truncated data
  expect_io_error(write_raw("trunc_header.st", ok, 0, 4000), "runs past the end");      // length > file
  expect_io_error(write_raw("huge_header.st", ok, 16, int64_t(1) << 40), "100 MiB");
  expect_io_error(write_raw("badjson.st", R"({"w":{"dtype":"F32",)", 16), "not valid JSON");
  expect_io_error(write_raw("notobj.st", R"({"w":[1,2]})", 0), "entry is not an object");
  expect_io_error(write_raw("array.st", R"([1,2,3])", 0), "does not start with '{'");
  expect_io_error(write_raw("dtype.st", R"({"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", 2),
                  "unsupported dtype 'F8_E4M3'");
  expect_io_error(write_raw("span.st", R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}})", 16),
                  "needs 24 bytes but data_offsets span 16");
  expect_io_error(write_raw("range.st", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", 16),
                  "run past the end of the 16-byte data buffer");
  expect_io_error(write_raw("overlap.st",
                            R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                            16),
                  "overlaps");
  expect_io_error(write_raw("gap.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16), "gap of 8 bytes");
  expect_io_error(write_raw("trailing.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 16),
                  "8 bytes after the last tensor");
  expect_io_error(write_raw("negshape.st", R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
                  "non-negative integer");
  expect_io_error(write_raw("reversed.st", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8), "< begin");
  expect_io_error(write_raw("missingfield.st", R"({"a":{"dtype":"F32","shape":[2]}})", 8), "needs dtype, shape and data_offsets");
  expect_io_error(write_raw("extrafield.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8),
                  "unknown field 'x'");
  expect_io_error(write_raw("meta.st", R"({"__metadata__":{"k":1}})", 0), "__metadata__ value of 'k' is not a string");
  expect_io_error(write_raw("bigshape.st", R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,8]}})", 8),
                  "too large");
}

TEST(Safetensors, WriterRejectsBadInput) {
  std::string path = temp_file("bad_write.st");
  auto t = Tensor::zeros({2});
  EXPECT_THROW(save_safetensors(path, {{"x", t}, {"x", t}}), IOError);
  EXPECT_THROW(save_safetensors(path, {{"", t}}), IOError);
  EXPECT_THROW(save_safetensors(path, {{"__metadata__", t}}), IOError);
  EXPECT_THROW(save_safetensors("/nonexistent_dir_st/x.st", {{"x", t}}), IOError);
}

// Positioned reads: ranges of one dim give the tensor's slices, and only their bytes are read (a
// file without checksums, as another writer's: with them, whole chunks are read —
// test_safetensors_checksums.cpp).
TEST(SafetensorsReader, ReadsRangesOfOneDimAndOnlyTheirBytes) {
  std::vector<float> v(4 * 6);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  const std::string path = write_raw("ranges.safetensors",
                                     R"({"pad":{"dtype":"F32","shape":[100],"data_offsets":[0,400]},)"
                                     R"("w":{"dtype":"F32","shape":[4,6],"data_offsets":[400,496]}})",
                                     0);
  {
    std::ofstream o(path, std::ios::binary | std::ios::app);
    o << std::string(400, '\0');
    o.write(reinterpret_cast<const char*>(v.data()), 96);
  }
  SafetensorsReader r(path);
  EXPECT_FALSE(r.has_checksums());
  EXPECT_EQ(r.data_bytes(), 4u * (100 + 24));
  uint64_t before = safetensors_bytes_read();
  Tensor cols = r.read_ranges("w", 1, {{1, 2}, {4, 1}});  // columns 1, 2, 4
  EXPECT_EQ(safetensors_bytes_read() - before, 4u * 4 * 3);
  ASSERT_EQ(cols.shape(), (Shape{4, 3}));
  Tensor want = Tensor::cat({Tensor::from_vector(v, {4, 6}).narrow(1, 1, 2), Tensor::from_vector(v, {4, 6}).narrow(1, 4, 1)}, 1);
  EXPECT_EQ(cols.to_double(), want.to_double());
  before = safetensors_bytes_read();
  Tensor rows = r.read_ranges("w", 0, {{3, 1}, {0, 1}});  // rows 3 then 0
  EXPECT_EQ(safetensors_bytes_read() - before, 4u * 6 * 2);
  auto rv = rows.to_double();
  EXPECT_EQ(rv[0], 18.0);
  EXPECT_EQ(rv[6], 0.0);
  EXPECT_EQ(r.read("w").to_double(), Tensor::from_vector(v, {4, 6}).to_double());
  EXPECT_THROW(r.read_ranges("w", 1, {{5, 2}}), IOError);  // past the end of the dim
  EXPECT_THROW(r.read("nope"), IOError);
}

// Hugging Face's sharded layout: an index naming the file of every tensor; the store reads by
// name across the files and rejects an index that disagrees with them.
TEST(SafetensorsStore, ShardedIndexReadsLikeOneFile) {
  const std::string fixture = ST_FIXTURE_DIR;
  SafetensorsFile f = read_safetensors(fixture + "/model.safetensors");
  const fs::path dir = fs::path(temp_file("sharded")).concat("_dir");
  fs::create_directories(dir);
  std::vector<std::string> files;
  const size_t n = f.tensors.size();
  for (int k = 0; k < 3; ++k) {  // three contiguous runs of the tensors
    NamedTensors part(f.tensors.begin() + k * n / 3, f.tensors.begin() + (k + 1) * n / 3);
    files.push_back(shard_file_name("model", k + 1, 3));
    save_safetensors((dir / files.back()).string(), part, {{"format", "pt"}});
  }
  EXPECT_EQ(files[1], "model-00002-of-00003.safetensors");
  write_safetensors_index(dir.string(), "model", files);
  auto index = nlohmann::json::parse(std::ifstream(dir / "model.safetensors.index.json"));
  uint64_t total = 0;
  for (auto& [name, t] : f.tensors) total += t.nbytes();
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  EXPECT_EQ(index["weight_map"].size(), n);
  EXPECT_TRUE(SafetensorsStore::exists(dir.string(), "model"));
  SafetensorsStore store(dir.string(), "model");
  EXPECT_EQ(store.names().size(), n);
  for (auto& [name, t] : f.tensors) EXPECT_EQ(store.read(name).to_double(), t.to_double()) << name;
  EXPECT_EQ(store.read_ranges("transformer.wte.weight", 0, {{10, 2}}).to_double(),
            load_safetensors(fixture + "/model.safetensors").at("transformer.wte.weight").narrow(0, 10, 2).to_double());
  // an index that names a file without the tensor, or misses a tensor a file holds
  auto broken = index;
  const std::string wte_file = index["weight_map"]["transformer.wte.weight"];
  broken["weight_map"]["transformer.wte.weight"] = wte_file == files[0] ? files[1] : files[0];
  std::ofstream(dir / "model.safetensors.index.json") << broken.dump();
  EXPECT_THROW(SafetensorsStore(dir.string(), "model"), IOError);
  broken = index;
  broken["weight_map"].erase("transformer.ln_f.bias");
  std::ofstream(dir / "model.safetensors.index.json") << broken.dump();
  try {
    SafetensorsStore s(dir.string(), "model");
    FAIL() << "a tensor the index does not list was accepted";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("transformer.ln_f.bias"), std::string::npos) << e.what();
  }
  EXPECT_THROW(SafetensorsStore(dir.string(), "optimizer"), IOError);
  fs::remove_all(dir);
}
