// Every read of a file our writer wrote is checked, whatever part of a tensor it reads
// (runtime/io/safetensors_checksums.h): a changed bit in any 64 KiB chunk fails every read that
// touches the chunk — whole, a row range, a column slice, a ZeRO-3 window — naming the file, the
// tensor and the chunk's bytes, while reads of the other chunks go on; a partial read reads
// exactly the chunks it touches. Header edits (offsets swapped between two tensors of one size,
// a dtype F32 → I32, a shape, a name, a metadata value, the checksum lists themselves) fail at
// open, naming the tensor where one is edited. Files of the older format (one checksum per whole
// tensor) still read and are checked by reading the whole tensor. checksum64 itself: pinned, every
// bit flip changes it, and the streaming form equals the one-shot one.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "runtime/common/checksum.h"
#include "runtime/io/safetensors.h"
#include "runtime/io/safetensors_checksums.h"

using namespace st;
using namespace st::runtime;
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

std::string temp_file(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("st_checksums_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return (d / name).string();
}

// A file as its header (JSON) and its data buffer.
struct Raw {
  ojson header;
  std::string data;
};
Raw read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string h(n, '\0');
  in.read(h.data(), static_cast<std::streamsize>(n));
  Raw r;
  r.header = ojson::parse(h);
  r.data.assign(std::istreambuf_iterator<char>(in), {});
  return r;
}
void write_raw(const std::string& path, const Raw& r, int indent = -1) {
  std::string h = r.header.dump(indent);
  h.append((8 - h.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << h << r.data;
}
uint64_t data_start(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  return 8 + n;
}
void flip_bit(const std::string& path, uint64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x10));
}
// The message of the IOError `fn` throws ("" when it does not throw one).
template <class F>
std::string io_error(F&& fn) {
  try {
    fn();
  } catch (const IOError& e) {
    return e.what();
  }
  return "";
}
bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

constexpr int64_t kRows = 70, kCols = 1024;  // w: 286720 bytes = 4 chunks of 65536 + one of 24576
constexpr uint64_t kChunk = kChecksumChunkBytes, kW = 4ull * kRows * kCols;

Tensor w_values() {
  std::vector<float> v(static_cast<size_t>(kRows * kCols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i % 9973) - 7.0f;
  return Tensor::from_vector(v, {kRows, kCols});
}

}  // namespace

TEST(SafetensorsChecksums, EveryChunkAReadTouchesIsCheckedAndOnlyThoseAreRead) {
  ASSERT_EQ(kChunk, 65536u);
  const std::string path = temp_file("chunks.safetensors");
  const Tensor w = w_values();
  save_safetensors(path, {{"a", Tensor::from_vector(std::vector<float>{1, 2, 3}, {3})}, {"w", w}});
  const uint64_t w_at = data_start(path) + 12;  // after a's 3 floats
  const int64_t row_bytes = 4 * kCols;          // 16 rows per chunk
  {
    SafetensorsReader r(path);
    ASSERT_TRUE(r.has_checksums());
    // what each read costs: the chunks it touches, whole
    auto bytes_of = [&](auto&& read) {
      const uint64_t before = safetensors_bytes_read();
      read();
      return safetensors_bytes_read() - before;
    };
    EXPECT_EQ(bytes_of([&] { r.read("w"); }), kW);
    EXPECT_EQ(bytes_of([&] { r.read_runs("w", {{kChunk / 4 + 100, 0, 1}}, 1); }), kChunk);  // one element of chunk 1
    EXPECT_EQ(bytes_of([&] { r.read_runs("w", {{2 * kChunk / 4 - 1, 0, 2}}, 2); }), 2 * kChunk);  // across 1 | 2
    EXPECT_EQ(bytes_of([&] { r.read_runs("w", {{kRows * kCols - 1, 0, 1}}, 1); }), kW - 4 * kChunk);  // the short last
    EXPECT_EQ(bytes_of([&] { r.read_ranges("w", 0, {{16, 16}}); }), kChunk);  // rows 16-31: chunk 1 exactly
    EXPECT_EQ(bytes_of([&] { r.read_ranges("w", 1, {{0, 512}}); }), kW);  // a column slice touches every chunk
    // and the values are the file's
    EXPECT_EQ(r.read_ranges("w", 1, {{100, 7}}).to_double(), w.narrow(1, 100, 7).contiguous().to_double());
    EXPECT_EQ(r.read_runs("w", {{kChunk / 4 - 3, 1, 6}}, 8).to_double()[3],
              w.flatten().narrow(0, kChunk / 4 - 1, 1).to_double()[0]);
  }
  for (uint64_t c = 0; c < 5; ++c) {
    const uint64_t at = c * kChunk + std::min<uint64_t>(kChunk, kW - c * kChunk) / 2;  // mid-chunk
    flip_bit(path, w_at + at);
    SafetensorsReader r(path);
    const std::string want = path + ": tensor 'w' does not match its checksum (bytes [" + std::to_string(c * kChunk) +
                             ", " + std::to_string(std::min(kW, (c + 1) * kChunk)) + ") of its " + std::to_string(kW);
    const int64_t row = static_cast<int64_t>(at) / row_bytes, other = (row + 40) % kRows;  // 40 rows: another chunk
    const int64_t elem = static_cast<int64_t>(at) / 4, far = (elem + 3 * kChunk / 4) % (kRows * kCols);
    EXPECT_TRUE(has(io_error([&] { r.read("w"); }), want)) << "chunk " << c;
    EXPECT_TRUE(has(io_error([&] { r.read_ranges("w", 0, {{row, 1}}); }), want)) << "chunk " << c << ": its row";
    EXPECT_TRUE(has(io_error([&] { r.read_ranges("w", 1, {{kCols / 2, kCols / 2}}); }), want)) << "chunk " << c;
    EXPECT_TRUE(has(io_error([&] { r.read_runs("w", {{elem, 0, 1}}, 1); }), want)) << "chunk " << c << ": a window";
    EXPECT_EQ(io_error([&] { r.read_ranges("w", 0, {{other, 1}}); }), "") << "chunk " << c << ": another chunk's row";
    EXPECT_EQ(io_error([&] { r.read_runs("w", {{far, 0, 1}}, 1); }), "") << "chunk " << c << ": another chunk's element";
    EXPECT_EQ(r.read("a").to_double(), (std::vector<double>{1, 2, 3}));
    flip_bit(path, w_at + at);  // back
  }
  EXPECT_EQ(read_safetensors(path).tensors[1].second.to_double(), w.to_double());
}

TEST(SafetensorsChecksums, HeaderEditsAreRefusedNamingTheTensor) {
  const std::string path = temp_file("header.safetensors"), edited = temp_file("edited.safetensors");
  std::vector<float> v(24), v2(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) - 5.5f, v2[i] = 2 * v[i];
  save_safetensors(path,
                   {{"a", Tensor::from_vector(v, {4, 6})},
                    {"b", Tensor::from_vector(v2, {4, 6})},
                    {"c", Tensor::from_vector(v, {24})},
                    {"i", Tensor::from_vector(std::vector<int64_t>{1, 2, 3}, {3})}},
                   {{"format", "pt"}});
  const Raw orig = read_raw(path);
  auto refused = [&](const std::string& what, const std::function<void(ojson&)>& edit) {
    Raw r = orig;
    edit(r.header);
    write_raw(edited, r);
    return io_error([&] { read_safetensors(edited); });
  };
  const std::string changed = "the header changed after it was written";
  std::string e = refused("offsets swapped", [](ojson& h) { std::swap(h["a"]["data_offsets"], h["b"]["data_offsets"]); });
  EXPECT_TRUE(has(e, edited + ": tensor 'b': its header entry (dtype F32, shape (4, 6), data_offsets [0, 96])") && has(e, changed)) << e;
  e = refused("dtype", [](ojson& h) { h["c"]["dtype"] = "I32"; });
  EXPECT_TRUE(has(e, "tensor 'c': its header entry (dtype I32") && has(e, changed)) << e;
  e = refused("shape", [](ojson& h) { h["a"]["shape"] = {6, 4}; });
  EXPECT_TRUE(has(e, "tensor 'a': its header entry (dtype F32, shape (6, 4)")) << e;
  e = refused("renamed", [](ojson& h) {
    ojson out;
    for (auto& [k, x] : h.items()) out[k == "b" ? "bb" : k] = x;
    h = out;
  });
  EXPECT_TRUE(has(e, "tensor 'bb': its header entry")) << e;
  e = refused("metadata", [](ojson& h) { h["__metadata__"]["format"] = "px"; });
  EXPECT_TRUE(has(e, "the header does not match its checksum") && has(e, changed)) << e;
  e = refused("a chunk checksum", [](ojson& h) {
    std::string s = h["__metadata__"][kChunksKey];
    s[0] = s[0] == '0' ? '1' : '0';
    h["__metadata__"][kChunksKey] = s;
  });
  EXPECT_TRUE(has(e, "the header does not match its checksum")) << e;
  e = refused("a tensor more", [](ojson& h) { h["__metadata__"][kEntriesKey] = std::string(h["__metadata__"][kEntriesKey]).substr(16); });
  EXPECT_TRUE(has(e, "the header lists 4 tensors, its checksums 3")) << e;
  e = refused("the header's own checksum gone", [](ojson& h) { h["__metadata__"].erase(kHeaderKey); });
  EXPECT_TRUE(has(e, std::string("has ") + kChunksKey + " but not")) << e;
  // whitespace and key order are not the header's content
  {
    Raw r = orig;
    write_raw(edited, r, 2);
    SafetensorsReader a(path), b(edited);
    EXPECT_EQ(b.header_checksum(), a.header_checksum());
    EXPECT_EQ(b.read("b").to_double(), a.read("b").to_double());
  }
  // a rewrite without our keys reads as another writer's file, unchecked: its header checksum
  // differs from the original's, which is what a checkpoint's state.json holds it to
  {
    Raw r = orig;
    r.header["__metadata__"] = ojson{{"format", "pt"}};
    write_raw(edited, r);
    SafetensorsReader b(edited);
    EXPECT_FALSE(b.has_checksums());
    EXPECT_NE(b.header_checksum(), SafetensorsReader(path).header_checksum());
  }
  EXPECT_EQ(io_error([&] { read_safetensors(path); }), "");
  for (const char* key : {kChunksKey, kEntriesKey, kHeaderKey, kChunkBytesKey, kLegacyChecksumKey})
    EXPECT_THROW(save_safetensors(temp_file("own_key.safetensors"), {}, {{key, ""}}), IOError) << key;
  EXPECT_EQ(SafetensorsReader(path).metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
}

// The format before chunks: "shardtrain.checksum64", one checksum of each whole tensor, as the
// older writer stored it (written here by hand). It reads; a part of a tensor is checked by
// reading the whole tensor.
TEST(SafetensorsChecksums, OlderFilesWithWholeTensorChecksumsStayReadable) {
  const std::string path = temp_file("v1.safetensors");
  const Tensor w = w_values(), a = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  Raw r;
  r.header["__metadata__"] = {{"format", "pt"},
                              {kLegacyChecksumKey, checksum_hex(checksum64(a.data_ptr(), 12)) +
                                                       checksum_hex(checksum64(w.data_ptr(), kW))}};
  r.header["a"] = {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 12}}};
  r.header["w"] = {{"dtype", "F32"}, {"shape", {kRows, kCols}}, {"data_offsets", {12, 12 + kW}}};
  r.data.assign(static_cast<const char*>(a.data_ptr()), 12);
  r.data.append(static_cast<const char*>(w.data_ptr()), kW);
  write_raw(path, r);
  {
    SafetensorsReader f(path);
    EXPECT_TRUE(f.has_checksums());
    EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
    EXPECT_EQ(f.read("w").to_double(), w.to_double());
    const uint64_t before = safetensors_bytes_read();
    EXPECT_EQ(f.read_ranges("w", 0, {{3, 2}}).to_double(), w.narrow(0, 3, 2).contiguous().to_double());
    EXPECT_EQ(safetensors_bytes_read() - before, kW);  // the whole tensor, to check it
  }
  flip_bit(path, data_start(path) + 12 + kW - 5);
  SafetensorsReader f(path);
  const std::string want = path + ": tensor 'w' does not match its checksum (bytes [0, " + std::to_string(kW) + ")";
  EXPECT_TRUE(has(io_error([&] { f.read_ranges("w", 0, {{3, 2}}); }), want));  // rows far from the flip
  EXPECT_TRUE(has(io_error([&] { f.read_runs("w", {{0, 0, 1}}, 1); }), want));
  EXPECT_EQ(f.read("a").to_double(), (std::vector<double>{1, 2, 3}));
}

// checksum64 itself: every single-bit change of a 45-byte buffer (the four lanes and a 13-byte
// tail) changes it, so does the length alone (a zero byte appended), and its value is pinned:
// checkpoints written before a change to it would no longer load. Fed in pieces of any sizes
// (a chunk read over several reads) it gives the same value.
TEST(Checksum, EveryBitFlipAndTheLengthChangeItAndPiecesGiveTheSameValue) {
  std::string buf = "shardtrain checksum64: four lanes and a tail.";
  ASSERT_EQ(buf.size(), 45u);
  const uint64_t base = checksum64(buf.data(), buf.size());
  for (size_t i = 0; i < buf.size(); ++i)
    for (int b = 0; b < 8; ++b) {
      std::string x = buf;
      x[i] = static_cast<char>(x[i] ^ (1 << b));
      EXPECT_NE(checksum64(x.data(), x.size()), base) << "byte " << i << " bit " << b;
    }
  std::string longer = buf + '\0';
  EXPECT_NE(checksum64(longer.data(), longer.size()), base);
  EXPECT_EQ(checksum_hex(base), "9806326f853173d8");
  uint64_t back = 0;
  EXPECT_TRUE(parse_checksum_hex(checksum_hex(base), back));
  EXPECT_EQ(back, base);
  EXPECT_FALSE(parse_checksum_hex("00000000000000g0", back));
  EXPECT_FALSE(parse_checksum_hex("0", back));
  std::mt19937_64 rng(7);
  std::string big(1000, '\0');
  for (char& c : big) c = static_cast<char>(rng());
  for (size_t n : {0, 1, 31, 32, 33, 45, 64, 999, 1000}) {
    const uint64_t want = checksum64(big.data(), n);
    for (int trial = 0; trial < 20; ++trial) {
      Checksum64 c;
      for (size_t at = 0; at < n;) {
        const size_t take = std::min<size_t>(n - at, rng() % 70);
        c.update(big.data() + at, take);
        at += take;
      }
      EXPECT_EQ(c.digest(), want) << n << " bytes, trial " << trial;
    }
  }
}
