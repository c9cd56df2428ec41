// The strict request-head parser (src/api/http_message.h): what it accepts, and each way a head
// can be malformed or ambiguous, refused with the status the transport answers.
#include "api/http_message.h"

#include <gtest/gtest.h>

#include <string>

namespace gpuslice::api::http {
namespace {

using State = HeadParse::State;

HeadParse Parse(const std::string& bytes, HeadLimits limits = {}) {
  return ParseRequestHead(bytes, limits);
}

void ExpectError(const std::string& bytes, int status) {
  const HeadParse p = Parse(bytes);
  EXPECT_EQ(p.state, State::kError) << bytes;
  EXPECT_EQ(p.error_status, status) << bytes << " -> " << p.error;
}

TEST(HttpHead, ParsesARequestWithItsHeadersQueryAndFraming) {
  const std::string head =
      "POST /v1/leases?all=true&tenant=team%2Da&x=a+b HTTP/1.1\r\n"
      "Host: 127.0.0.1\r\nContent-Length: 12\r\nX-Thing:  spaced value \t\r\n\r\n";
  const HeadParse p = Parse(head + "{\"a\":\"bcd\"}");
  ASSERT_EQ(p.state, State::kComplete) << p.error;
  EXPECT_EQ(p.head_bytes, head.size());
  EXPECT_EQ(p.head.request.method, "POST");
  EXPECT_EQ(p.head.request.path, "/v1/leases");
  EXPECT_EQ(p.head.request.get_param_value("tenant"), "team-a");
  EXPECT_EQ(p.head.request.get_param_value("x"), "a b");
  EXPECT_EQ(p.head.request.get_header_value("x-thing"), "spaced value");
  EXPECT_EQ(p.head.content_length, 12);
  EXPECT_TRUE(p.head.keep_alive);
}

TEST(HttpHead, IsIncompleteUntilTheBlankLine) {
  EXPECT_EQ(Parse("GET / HTTP/1.1\r\nHost: x\r\n").state, State::kIncomplete);
  EXPECT_EQ(Parse("GET / HTTP/1.1\r").state, State::kIncomplete);
  EXPECT_EQ(Parse("").state, State::kIncomplete);
}

TEST(HttpHead, ConnectionOptions) {
  EXPECT_FALSE(Parse("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").head.keep_alive);
  EXPECT_FALSE(Parse("GET / HTTP/1.0\r\n\r\n").head.keep_alive);
  EXPECT_TRUE(Parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").head.keep_alive);
  EXPECT_TRUE(
      Parse("GET / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n").head.expects_continue);
}

TEST(HttpHead, RefusesAmbiguousFraming) {
  // Two lengths: a proxy may take the other one, and the rest would run as a second request.
  ExpectError("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 400);
  ExpectError("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\n", 400);
  ExpectError("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\n", 400);
  ExpectError("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n", 400);
  ExpectError("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", 411);
  ExpectError(
      "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", 400);
  ExpectError("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n", 400);
}

TEST(HttpHead, RefusesBadBytesAndLines) {
  ExpectError("GET / HTTP/1.1\rHost: x\r\n\r\n", 400);  // bare CR
  ExpectError("GET / HTTP/1.1\nHost: x\n\n", 400);      // bare LF
  constexpr char kNul[] = "GET / HTTP/1.1\r\nHost: x\0y\r\n\r\n";
  ExpectError(std::string(kNul, sizeof kNul - 1), 400);
  ExpectError("GET / HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400);
  ExpectError("GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n folded\r\n\r\n", 400);
  ExpectError(
      "GET / HTTP/1.1\r\nHost: x\r\nX: a\x01"
      "b\r\n\r\n",
      400);
  ExpectError("GET / HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n", 400);
  ExpectError("GET / HTTP/1.1\r\nHost: x\r\n: v\r\n\r\n", 400);
  // A bad byte is refused before the head ends.
  constexpr char kEarly[] = "GET / HTTP/1.1\r\nHost: \0";
  EXPECT_EQ(Parse(std::string(kEarly, sizeof kEarly - 1)).state, State::kError);
}

TEST(HttpHead, RefusesBadRequestLines) {
  ExpectError("GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400);
  ExpectError("GET http://evil/ HTTP/1.1\r\nHost: x\r\n\r\n", 400);
  ExpectError("GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505);
  ExpectError("GET / HTTX/1.1\r\nHost: x\r\n\r\n", 400);
  ExpectError("G(T / HTTP/1.1\r\nHost: x\r\n\r\n", 400);
  ExpectError("\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", 400);
  ExpectError("GET /a%zz?q=%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400);
  ExpectError("GET / HTTP/1.1\r\n\r\n", 400);  // no Host
  ExpectError("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400);
  ExpectError("GET / HTTP/1.1\r\nHost: x\r\nExpect: something\r\n\r\n", 417);
}

TEST(HttpHead, LimitsTheHeadsSize) {
  HeadLimits limits;
  limits.max_head_bytes = 64;
  limits.max_headers = 2;
  EXPECT_EQ(
      Parse("GET / HTTP/1.1\r\nHost: x\r\nX-Long: " + std::string(100, 'a'), limits).error_status,
      431);
  EXPECT_EQ(Parse("GET / HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\n\r\n", limits).error_status, 431);
  EXPECT_EQ(Parse("GET / HTTP/1.1\r\nHost: x\r\nA: 1\r\n\r\n", limits).state, State::kComplete);
}

TEST(HttpHead, SerializesAResponse) {
  Response r;
  r.status = 404;
  r.set_content("{}", "application/json");
  r.close = true;
  r.set_header("Allow", "GET");
  EXPECT_EQ(SerializeResponse(r),
            "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
            "Connection: close\r\nAllow: GET\r\n\r\n{}");
}

}  // namespace
}  // namespace gpuslice::api::http
