// The integrity check's hash (lib/interpose/integrity.h). The end-to-end proof is cudart accepting it (the
// cudart_* tests); these pin the pieces so that a change is caught without nvcc.
#include "integrity.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace gpupool::interpose {
namespace {

std::string Hex(const std::array<uint8_t, 16>& digest) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : digest) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

std::string Md2Hex(const std::string& text) {
  Md2 md2;
  md2.Update(text.data(), text.size());
  return Hex(md2.Finish());
}

std::array<uint8_t, 16> UuidFromHex(const char* hex) {
  std::array<uint8_t, 16> uuid{};
  for (int i = 0; i < 16; ++i) uuid[i] = static_cast<uint8_t>(std::stoi(std::string(hex + 2 * i, 2), nullptr, 16));
  return uuid;
}

// The inputs and answer of one run that cudart 13.0 accepted (GPUPOOL_LOG=debug prints them: see
// integrity_check.check in lib/interpose/export_tables.cc), with GPUPOOL_FAKE_DEVICES=2:16GiB.
IntegrityInputs AcceptedRun() {
  IntegrityInputs in;
  in.driver_version = 13000;
  in.version = 13002;
  in.pid = 24120;
  in.thread = 0x29ce1000;
  in.cudart_table = reinterpret_cast<const void*>(uintptr_t{0x7ffa29cdc500});
  in.integrity_table = reinterpret_cast<const void*>(uintptr_t{0x7ffa29cdb310});
  in.check_function = reinterpret_cast<const void*>(uintptr_t{0x7ffa29cb8670});
  in.unix_seconds = 1795315645;
  in.devices = {
      IntegrityDevice{UuidFromHex("677075706f6f6c408000000000000000"), 0, 1, 0},
      IntegrityDevice{UuidFromHex("677075706f6f6c408000000000000001"), 0, 2, 0},
  };
  return in;
}

TEST(Md2, Rfc1319TestSuite) {
  EXPECT_EQ(Md2Hex(""), "8350e5a3e24c153df2275c9f80692773");
  EXPECT_EQ(Md2Hex("a"), "32ec01ec4a6dac72c0ab96fb34c0b5d1");
  EXPECT_EQ(Md2Hex("abc"), "da853b0d3f88d99b30283a69e6ded6bb");
  EXPECT_EQ(Md2Hex("message digest"), "ab4f496bfb2a530b219ff33031fe06b0");
  EXPECT_EQ(Md2Hex("abcdefghijklmnopqrstuvwxyz"), "4e8ddff3650292ab5a4108c3aa47940b");
  EXPECT_EQ(Md2Hex("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"),
            "da33def2a42df13975352846c30338cd");
  EXPECT_EQ(Md2Hex("12345678901234567890123456789012345678901234567890123456789012345678901234567890"),
            "d5976f79d83d3a0dc9806c3c66f3efd8");
}

TEST(Md2, SplitUpdatesEqualOneUpdate) {
  const std::string text = "The quick brown fox jumps over the lazy dog, twice: the quick brown fox.";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    Md2 md2;
    md2.Update(text.data(), cut);
    md2.Update(text.data() + cut, text.size() - cut);
    EXPECT_EQ(Hex(md2.Finish()), Md2Hex(text)) << "cut at " << cut;
  }
}

TEST(HmacMd2, IsMd2OfOuterPadAndInnerDigest) {
  std::array<uint8_t, 16> key;
  for (int i = 0; i < 16; ++i) key[i] = static_cast<uint8_t>(i * 17 + 3);
  const std::vector<uint8_t> message = {'g', 'p', 'u', 'p', 'o', 'o', 'l'};
  std::string inner_input, outer_input;
  for (uint8_t k : key) inner_input += static_cast<char>(k ^ 0x36);
  inner_input.append(message.begin(), message.end());
  Md2 inner;
  inner.Update(inner_input.data(), inner_input.size());
  const std::array<uint8_t, 16> inner_digest = inner.Finish();
  for (uint8_t k : key) outer_input += static_cast<char>(k ^ 0x5c);
  outer_input.append(inner_digest.begin(), inner_digest.end());
  EXPECT_EQ(Hex(HmacMd2(key, message)), Md2Hex(outer_input));
}

TEST(IntegrityHash, VersionsEndingInZeroAndOneAnswerConstants) {
  IntegrityInputs in = AcceptedRun();
  in.version = 13000;
  EXPECT_EQ(IntegrityHash(in), (std::array<uint64_t, 2>{0x3341181c03cb675cULL, 0x8ed383aa1f4cd1e8ULL}));
  in.version = 13001;
  EXPECT_EQ(IntegrityHash(in), (std::array<uint64_t, 2>{0x1841181c03cb675cULL, 0x8ed383aa1f4cd1e8ULL}));
  in.version = 12090;
  in.pid = 1;  // Nothing is hashed: the inputs do not matter.
  EXPECT_EQ(IntegrityHash(in)[0], 0x3341181c03cb675cULL);
}

TEST(IntegrityHash, MatchesAnAnswerCudartAccepted) {
  EXPECT_EQ(IntegrityHash(AcceptedRun()), (std::array<uint64_t, 2>{0x4b4f6182d8d16f2fULL, 0xb702930cac3f89daULL}));
}

TEST(IntegrityHash, EveryInputChangesTheAnswer) {
  const std::array<uint64_t, 2> base = IntegrityHash(AcceptedRun());
  auto changed = [&](auto mutate) {
    IntegrityInputs in = AcceptedRun();
    mutate(in);
    return IntegrityHash(in) != base;
  };
  EXPECT_TRUE(changed([](IntegrityInputs& in) { in.driver_version = 13010; }));
  EXPECT_TRUE(changed([](IntegrityInputs& in) { in.version = 13012; }));
  EXPECT_TRUE(changed([](IntegrityInputs& in) { in.pid += 1; }));
  EXPECT_TRUE(changed([](IntegrityInputs& in) { in.thread += 1; }));
  EXPECT_TRUE(changed([](IntegrityInputs& in) { in.cudart_table = nullptr; }));
  EXPECT_TRUE(changed([](IntegrityInputs& in) { in.integrity_table = nullptr; }));
  EXPECT_TRUE(changed([](IntegrityInputs& in) { in.check_function = nullptr; }));
  EXPECT_TRUE(changed([](IntegrityInputs& in) { in.unix_seconds += 1; }));
  EXPECT_TRUE(changed([](IntegrityInputs& in) { in.devices[1].uuid[15] ^= 1; }));
  EXPECT_TRUE(changed([](IntegrityInputs& in) { in.devices[0].pci_domain = 1; }));
  EXPECT_TRUE(changed([](IntegrityInputs& in) { in.devices[0].pci_bus = 7; }));
  EXPECT_TRUE(changed([](IntegrityInputs& in) { in.devices[0].pci_device = 1; }));
  EXPECT_TRUE(changed([](IntegrityInputs& in) { in.devices.pop_back(); }));
}

}  // namespace
}  // namespace gpupool::interpose
