// The replay ring and the head+tail capture, against a reference model:
// every byte kept is the right byte, every byte missed is counted.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "server/events/ring.h"
}

namespace
{

std::string Read(const ws_ring *r, uint64_t off, size_t max, uint64_t *gap)
{
    std::string out(max, '\0');
    size_t n = ws_ring_read(r, off, out.data(), max, gap);
    out.resize(n);
    return out;
}

TEST(Ring, KeepsTheMostRecentBytesAndCountsGaps)
{
    ws_ring *r = nullptr;
    ASSERT_EQ(ws_ring_new(8, &r), 0);
    uint64_t gap = 99;
    EXPECT_EQ(Read(r, 0, 16, &gap), "");
    EXPECT_EQ(gap, 0u);
    ws_ring_append(r, "abcde", 5);
    EXPECT_EQ(Read(r, 0, 16, &gap), "abcde");
    EXPECT_EQ(gap, 0u);
    ws_ring_append(r, "fghij", 5); // wraps: holds "cdefghij"
    EXPECT_EQ(ws_ring_end(r), 10u);
    EXPECT_EQ(ws_ring_start(r), 2u);
    EXPECT_EQ(Read(r, 0, 16, &gap), "cdefghij");
    EXPECT_EQ(gap, 2u);
    EXPECT_EQ(Read(r, 4, 3, &gap), "efg");
    EXPECT_EQ(gap, 0u);
    EXPECT_EQ(Read(r, 10, 16, &gap), "");
    EXPECT_EQ(Read(r, 50, 16, &gap), "");
    // One append larger than the ring keeps only its own tail.
    ws_ring_append(r, "0123456789ABCDEF", 16);
    EXPECT_EQ(ws_ring_end(r), 26u);
    EXPECT_EQ(Read(r, 0, 64, &gap), "89ABCDEF");
    EXPECT_EQ(gap, 18u);
    ws_ring_free(r);
    EXPECT_EQ(ws_ring_new(0, &r), -EINVAL);
}

TEST(Ring, MatchesAReferenceModelUnderRandomAppendsAndReads)
{
    std::mt19937 rng(42);
    for (size_t cap : {1u, 7u, 64u, 1000u}) {
        ws_ring *r = nullptr;
        ASSERT_EQ(ws_ring_new(cap, &r), 0);
        std::string stream;
        for (int i = 0; i < 2000; i++) {
            std::string chunk(rng() % (2 * cap + 3), '\0');
            for (auto &ch : chunk)
                ch = static_cast<char>(rng());
            ws_ring_append(r, chunk.data(), chunk.size());
            stream += chunk;
            uint64_t off = stream.empty() ? 0 : rng() % (stream.size() + 2);
            size_t max = rng() % (cap + 5);
            uint64_t gap;
            std::string got = Read(r, off, max, &gap);
            uint64_t start = stream.size() > cap ? stream.size() - cap : 0;
            uint64_t from = off < start ? start : off;
            ASSERT_EQ(gap, off < start ? start - off : 0) << cap << " " << i;
            std::string want = from < stream.size() ? stream.substr(from, max) : "";
            ASSERT_EQ(got, want) << cap << " " << i;
        }
        ws_ring_free(r);
    }
}

std::string Tail(const ws_capture *c, const ws_capture_view &v)
{
    std::string out(v.tail_len, '\0');
    ws_capture_tail(c, out.data());
    return out;
}

TEST(Ring, ReserveCommitAndPeekAgreeWithAppendAndRead)
{
    // Two rings fed the same bytes, one by copies, one in place: every
    // offset reads back the same, across wrap-arounds.
    struct ws_ring *a = nullptr, *b = nullptr;
    ASSERT_EQ(ws_ring_new(1000, &a), 0);
    ASSERT_EQ(ws_ring_new(1000, &b), 0);
    std::mt19937 rng(7);
    uint8_t next = 0;
    for (int round = 0; round < 500; round++) {
        size_t want = rng() % 1500;
        struct iovec iov[2];
        size_t n = ws_ring_reserve(b, want, iov);
        ASSERT_GE(n, 1u);
        size_t total = iov[0].iov_len + (n == 2 ? iov[1].iov_len : 0);
        ASSERT_EQ(total, want < 1000 ? want : 1000u);
        // Write only part of the reservation, as a short read would.
        size_t used = total ? rng() % (total + 1) : 0;
        std::vector<uint8_t> bytes(used);
        for (auto &c : bytes)
            c = next++;
        size_t k = 0;
        for (size_t i = 0; i < n && k < used; i++)
            for (size_t j = 0; j < iov[i].iov_len && k < used; j++)
                static_cast<uint8_t *>(iov[i].iov_base)[j] = bytes[k++];
        ws_ring_commit(b, used);
        ws_ring_append(a, bytes.data(), bytes.size());
        ASSERT_EQ(ws_ring_end(a), ws_ring_end(b));
        ASSERT_EQ(ws_ring_start(a), ws_ring_start(b));
        // Peek everything held, piece by piece, against a copying read.
        uint64_t off = ws_ring_start(b);
        while (off < ws_ring_end(b)) {
            const uint8_t *p = nullptr;
            size_t got = ws_ring_peek(b, off, 300, &p);
            ASSERT_GT(got, 0u);
            ASSERT_LE(got, 300u);
            std::vector<uint8_t> want_bytes(got);
            uint64_t gap = 1;
            ASSERT_EQ(ws_ring_read(a, off, want_bytes.data(), got, &gap), got);
            ASSERT_EQ(gap, 0u);
            ASSERT_EQ(0, memcmp(p, want_bytes.data(), got));
            off += got;
        }
    }
    const uint8_t *p = nullptr;
    EXPECT_EQ(ws_ring_peek(b, ws_ring_end(b), 10, &p), 0u);
    if (ws_ring_start(b) > 0) {
        EXPECT_EQ(ws_ring_peek(b, ws_ring_start(b) - 1, 10, &p), 0u);
    }
    ws_ring_free(a);
    ws_ring_free(b);
}

TEST(Capture, KeepsHeadAndTailWithExactCounts)
{
    ws_capture *c = nullptr;
    ASSERT_EQ(ws_capture_new(4, 4, &c), 0);
    ws_capture_view v;
    ws_capture_append(c, "abc", 3);
    ws_capture_get_view(c, &v);
    EXPECT_EQ(std::string((const char *)v.head, v.head_len), "abc");
    EXPECT_EQ(v.tail_len, 0u);
    EXPECT_FALSE(v.truncated);
    ws_capture_append(c, "defgh", 5); // head "abcd", tail "efgh": nothing lost
    ws_capture_get_view(c, &v);
    EXPECT_EQ(std::string((const char *)v.head, v.head_len), "abcd");
    EXPECT_EQ(Tail(c, v), "efgh");
    EXPECT_EQ(v.total, 8u);
    EXPECT_EQ(v.dropped, 0u);
    EXPECT_FALSE(v.truncated);
    ws_capture_append(c, "ijklmnop", 8); // 16 bytes: middle 8 dropped
    ws_capture_get_view(c, &v);
    EXPECT_EQ(std::string((const char *)v.head, v.head_len), "abcd");
    EXPECT_EQ(Tail(c, v), "mnop");
    EXPECT_EQ(v.total, 16u);
    EXPECT_EQ(v.dropped, 8u);
    EXPECT_TRUE(v.truncated);
    EXPECT_EQ(v.head_len + v.tail_len + v.dropped, v.total);
    ws_capture_free(c);
}

TEST(Capture, HeadOnlyAndTailOnly)
{
    ws_capture *c = nullptr;
    ws_capture_view v;
    ASSERT_EQ(ws_capture_new(3, 0, &c), 0);
    ws_capture_append(c, "abcdef", 6);
    ws_capture_get_view(c, &v);
    EXPECT_EQ(std::string((const char *)v.head, v.head_len), "abc");
    EXPECT_EQ(v.tail_len, 0u);
    EXPECT_EQ(v.dropped, 3u);
    ws_capture_free(c);
    ASSERT_EQ(ws_capture_new(0, 3, &c), 0);
    ws_capture_append(c, "abcdef", 6);
    ws_capture_get_view(c, &v);
    EXPECT_EQ(v.head_len, 0u);
    EXPECT_EQ(Tail(c, v), "def");
    EXPECT_EQ(v.dropped, 3u);
    ws_capture_free(c);
    EXPECT_EQ(ws_capture_new(0, 0, &c), -EINVAL);
}

} // namespace
