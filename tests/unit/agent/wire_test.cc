// The agent's control channel codec: frames written and read back, every
// way a header or a payload can be wrong refused with its error, frames
// split at every byte, and random bytes never crashing the reader or making
// it take a frame it should not.
#include <errno.h>
#include <string.h>

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "server/agent/wire.h"
}

namespace
{

std::vector<uint8_t> Frame(uint8_t type, uint32_t stream,
                           const std::function<void(ws_wire_out *)> &fields)
{
    std::vector<uint8_t> buf(WS_WIRE_FRAME_MAX);
    ws_wire_out o;
    ws_wire_begin(&o, buf.data(), buf.size(), static_cast<ws_wire_type>(type), stream);
    fields(&o);
    long n = ws_wire_end(&o);
    EXPECT_GT(n, 0);
    buf.resize(n > 0 ? (size_t)n : 0);
    return buf;
}

struct Reader {
    std::vector<uint8_t> buf = std::vector<uint8_t>(WS_WIRE_FRAME_MAX);
    ws_wire_in in;
    Reader()
    {
        ws_wire_in_init(&in, buf.data(), buf.size());
    }
    void Add(const uint8_t *p, size_t n)
    {
        size_t room;
        uint8_t *at = ws_wire_in_space(&in, &room);
        ASSERT_LE(n, room);
        if (n)
            memcpy(at, p, n);
        ws_wire_in_added(&in, n);
    }
    void Add(const std::vector<uint8_t> &v)
    {
        Add(v.data(), v.size());
    }
};

TEST(Wire, RoundTrip)
{
    auto f = Frame(WS_WIRE_START, 7, [](ws_wire_out *o) {
        ws_wire_put_str(o, WS_WIRE_T_ARGV, "/bin/echo");
        ws_wire_put_str(o, WS_WIRE_T_ARGV, "hello world");
        ws_wire_put_u64(o, WS_WIRE_T_TIMEOUT_MS, 0x0102030405060708ull);
        ws_wire_put_str(o, WS_WIRE_T_CWD, "/workspace");
    });
    ASSERT_EQ(f.size(), WS_WIRE_HEADER + 4 * WS_WIRE_FIELD_HEADER + 9 + 11 + 8 + 10);
    EXPECT_EQ(f[0], WS_WIRE_VERSION);
    EXPECT_EQ(f[1], WS_WIRE_START);

    Reader r;
    r.Add(f);
    ws_wire_frame fr;
    ASSERT_EQ(ws_wire_next(&r.in, &fr), 1);
    EXPECT_EQ(fr.type, WS_WIRE_START);
    EXPECT_EQ(fr.stream, 7u);
    EXPECT_EQ(ws_wire_check(&fr), 0);
    size_t pos = 0;
    ws_wire_field fl;
    std::vector<std::string> strs;
    uint64_t timeout = 0;
    char s[64];
    while (ws_wire_next_field(&fr, &pos, &fl) == 1) {
        if (fl.tag == WS_WIRE_T_TIMEOUT_MS) {
            ASSERT_EQ(ws_wire_u64(&fl, &timeout), 0);
            EXPECT_EQ(ws_wire_str(&fl, s, sizeof(s)), 0); // 8 bytes, no NUL: a string too
        } else {
            ASSERT_EQ(ws_wire_str(&fl, s, sizeof(s)), 0);
            strs.push_back(s);
            EXPECT_EQ(ws_wire_u64(&fl, &timeout), fl.len == 8 ? 0 : -EPROTO);
        }
    }
    EXPECT_EQ(timeout, 0x0102030405060708ull);
    EXPECT_EQ(strs, (std::vector<std::string>{"/bin/echo", "hello world", "/workspace"}));
    EXPECT_EQ(ws_wire_next(&r.in, &fr), 0);
    EXPECT_EQ(ws_wire_in_pending(&r.in), 0u);
    EXPECT_STREQ(ws_wire_type_name(WS_WIRE_EXITED), "EXITED");
    EXPECT_STREQ(ws_wire_type_name(0), "?");
    EXPECT_STREQ(ws_wire_type_name(WS_WIRE_TYPE_MAX + 1), "?");
}

// A frame fed one byte at a time is taken exactly once, when whole; two
// frames in one read are both taken.
TEST(Wire, SplitAtEveryByte)
{
    auto a =
        Frame(WS_WIRE_SIGNAL, 3, [](ws_wire_out *o) { ws_wire_put_u64(o, WS_WIRE_T_SIGNO, 15); });
    auto b =
        Frame(WS_WIRE_HELLO, 0, [](ws_wire_out *o) { ws_wire_put_u64(o, WS_WIRE_T_VERSION, 1); });
    Reader r;
    ws_wire_frame fr;
    for (size_t i = 0; i < a.size(); i++) {
        EXPECT_EQ(ws_wire_next(&r.in, &fr), 0) << i;
        r.Add(&a[i], 1);
    }
    ASSERT_EQ(ws_wire_next(&r.in, &fr), 1);
    EXPECT_EQ(fr.type, WS_WIRE_SIGNAL);
    std::vector<uint8_t> both = a;
    both.insert(both.end(), b.begin(), b.end());
    r.Add(both);
    ASSERT_EQ(ws_wire_next(&r.in, &fr), 1);
    EXPECT_EQ(fr.type, WS_WIRE_SIGNAL);
    ASSERT_EQ(ws_wire_next(&r.in, &fr), 1);
    EXPECT_EQ(fr.type, WS_WIRE_HELLO);
    EXPECT_EQ(ws_wire_next(&r.in, &fr), 0);
    // Half a frame left over is pending: a stream ending here is truncated.
    r.Add(a.data(), 5);
    EXPECT_EQ(ws_wire_in_pending(&r.in), 5u);
}

TEST(Wire, BadHeadersAreRefused)
{
    auto good = Frame(WS_WIRE_HELLO, 0, [](ws_wire_out *) {});
    struct Case {
        const char *what;
        size_t at;
        uint8_t value;
        int want;
    } cases[] = {
        {"version 0", 0, 0, -EPROTO},
        {"version 2", 0, 2, -EPROTO},
        {"type 0", 1, 0, -EPROTO},
        {"type past the last", 1, WS_WIRE_TYPE_MAX + 1, -EPROTO},
        {"a flag", 2, 1, -EPROTO},
        {"a high flag", 3, 0x80, -EPROTO},
        {"length over the limit", 11, 0x7f, -EMSGSIZE},
    };
    for (const auto &c : cases) {
        auto f = good;
        f[c.at] = c.value;
        Reader r;
        r.Add(f);
        ws_wire_frame fr;
        EXPECT_EQ(ws_wire_next(&r.in, &fr), c.want) << c.what;
    }
    // Exactly the limit is a frame; one more byte is not.
    std::vector<uint8_t> big(WS_WIRE_HEADER + WS_WIRE_PAYLOAD_MAX, 0);
    big[0] = WS_WIRE_VERSION;
    big[1] = WS_WIRE_START;
    uint32_t len = WS_WIRE_PAYLOAD_MAX;
    memcpy(&big[8], &len, 4);
    Reader r;
    r.Add(big);
    ws_wire_frame fr;
    EXPECT_EQ(ws_wire_next(&r.in, &fr), 1);
    len++;
    memcpy(&big[8], &len, 4);
    Reader r2;
    r2.Add(big.data(), WS_WIRE_HEADER);
    EXPECT_EQ(ws_wire_next(&r2.in, &fr), -EMSGSIZE);
}

TEST(Wire, BadFieldsAreRefused)
{
    // A field whose length runs past the payload.
    auto f = Frame(WS_WIRE_START, 1,
                   [](ws_wire_out *o) { ws_wire_put_str(o, WS_WIRE_T_ARGV, "/bin/true"); });
    f[WS_WIRE_HEADER + 2] = 200;
    Reader r;
    r.Add(f);
    ws_wire_frame fr;
    ASSERT_EQ(ws_wire_next(&r.in, &fr), 1);
    EXPECT_EQ(ws_wire_check(&fr), -EPROTO);
    // A payload that ends inside a field header.
    auto g = Frame(WS_WIRE_START, 1,
                   [](ws_wire_out *o) { ws_wire_put_bytes(o, WS_WIRE_T_ARGV, "ab", 2); });
    g.pop_back();
    g.pop_back();
    g.pop_back();
    uint32_t len = (uint32_t)(g.size() - WS_WIRE_HEADER);
    memcpy(&g[8], &len, 4);
    Reader r2;
    r2.Add(g);
    ASSERT_EQ(ws_wire_next(&r2.in, &fr), 1);
    EXPECT_EQ(ws_wire_check(&fr), -EPROTO);

    // Strings: empty, with a NUL, too long for the buffer; numbers of the
    // wrong size.
    char buf[8];
    const uint8_t nul[] = {'a', 0, 'b'};
    ws_wire_field fl = {WS_WIRE_T_ARGV, 0, nul};
    EXPECT_EQ(ws_wire_str(&fl, buf, sizeof(buf)), -EPROTO);
    fl.len = 3;
    EXPECT_EQ(ws_wire_str(&fl, buf, sizeof(buf)), -EPROTO);
    const uint8_t longer[] = "12345678";
    fl = {WS_WIRE_T_ARGV, 8, longer};
    EXPECT_EQ(ws_wire_str(&fl, buf, sizeof(buf)), -ENOSPC);
    uint64_t v;
    fl.len = 7;
    EXPECT_EQ(ws_wire_u64(&fl, &v), -EPROTO);
    fl.len = 9;
    EXPECT_EQ(ws_wire_u64(&fl, &v), -EPROTO);
}

// A frame that does not fit the writer's buffer, or the protocol, is
// refused rather than cut.
TEST(Wire, WriterOverflowIsAnError)
{
    uint8_t small[32];
    ws_wire_out o;
    ws_wire_begin(&o, small, sizeof(small), WS_WIRE_START, 1);
    ws_wire_put_str(&o, WS_WIRE_T_ARGV, "/a/path/longer/than/the/buffer/holds");
    EXPECT_EQ(ws_wire_end(&o), -EMSGSIZE);
    std::vector<uint8_t> huge(WS_WIRE_FRAME_MAX + 64);
    std::string arg(WS_WIRE_PAYLOAD_MAX, 'x');
    ws_wire_begin(&o, huge.data(), huge.size(), WS_WIRE_START, 1);
    ws_wire_put_str(&o, WS_WIRE_T_ARGV, arg.c_str());
    EXPECT_EQ(ws_wire_end(&o), -EMSGSIZE);
}

// Random bytes: the reader never crashes (ASan and UBSan watch the same
// test), never hands out a frame beyond what it holds, and either stops
// with an error or waits for more.
TEST(Wire, GarbageNeverCrashes)
{
    std::mt19937 rng(12345);
    for (int round = 0; round < 20000; round++) {
        size_t n = rng() % 64;
        std::vector<uint8_t> bytes(n);
        for (auto &b : bytes)
            b = (uint8_t)rng();
        // Half of them start like a real header, so payload parsing runs.
        if (n >= WS_WIRE_HEADER && (round & 1)) {
            bytes[0] = WS_WIRE_VERSION;
            bytes[1] = 1 + rng() % WS_WIRE_TYPE_MAX;
            bytes[2] = bytes[3] = 0;
            uint32_t len = (uint32_t)(rng() % (n - WS_WIRE_HEADER + 1));
            memcpy(&bytes[8], &len, 4);
        }
        Reader r;
        r.Add(bytes);
        ws_wire_frame fr;
        int got;
        size_t taken = 0;
        while ((got = ws_wire_next(&r.in, &fr)) == 1) {
            taken += WS_WIRE_HEADER + fr.len;
            ASSERT_LE(taken, n);
            (void)ws_wire_check(&fr);
            size_t pos = 0;
            ws_wire_field fl;
            char s[80];
            uint64_t v;
            while (ws_wire_next_field(&fr, &pos, &fl) == 1) {
                ASSERT_LE(pos, fr.len);
                (void)ws_wire_str(&fl, s, sizeof(s));
                (void)ws_wire_u64(&fl, &v);
            }
        }
        EXPECT_TRUE(got == 0 || got == -EPROTO || got == -EMSGSIZE) << got;
    }
}

} // namespace
