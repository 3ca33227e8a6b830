#include "core/util.h"

#include <gtest/gtest.h>

#include <string>

namespace gpupool {
namespace {

// The one comparison of secrets (lease secrets, tokens, tickets): equal bytes only, whatever the lengths, prefixes
// or bytes after a NUL. Its timing is not asserted here (no timed assertions in unit tests).
TEST(ConstantTimeEquals, IsTrueForTheSameBytesOnly) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("alice-token-0123456789abcdef", "alice-token-0123456789abcdef"));
  EXPECT_FALSE(ConstantTimeEquals("alice-token-0123456789abcdef", "alice-token-0123456789abcdeF"));
  EXPECT_FALSE(ConstantTimeEquals("alice-token-0123456789abcdef", "Alice-token-0123456789abcdef"));
  // A prefix, or the same bytes and more, is not the secret.
  EXPECT_FALSE(ConstantTimeEquals("secret", "secret-and-more"));
  EXPECT_FALSE(ConstantTimeEquals("secret-and-more", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", ""));
  EXPECT_FALSE(ConstantTimeEquals("", "secret"));
  // Bytes past a NUL count: tickets are raw bytes.
  const std::string a("ab\0cd", 5), b("ab\0ce", 5), c("ab", 2);
  EXPECT_TRUE(ConstantTimeEquals(a, std::string("ab\0cd", 5)));
  EXPECT_FALSE(ConstantTimeEquals(a, b));
  EXPECT_FALSE(ConstantTimeEquals(a, c));
  // A shorter guess padded with NULs to the secret's length is still wrong.
  EXPECT_FALSE(ConstantTimeEquals(std::string("ab\0\0", 4), c));
  EXPECT_FALSE(ConstantTimeEquals(c, std::string("ab\0\0", 4)));
}

}  // namespace
}  // namespace gpupool
