// The docker exec stream demultiplexer: exact slices for hand-made input,
// every chunking of the input gives the same streams, backpressure stops
// exactly after a slice and resumes from there, and every malformed header
// fails with -EPROTO without delivering anything of the bad frame.
#include <cerrno>
#include <climits>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

extern "C" {
#include "server/docker/frames.h"
}

namespace
{

using Bytes = std::string;

Bytes Header(uint8_t stream, uint32_t size)
{
    Bytes h(WS_FRAMES_HEADER_LEN, '\0');
    h[0] = static_cast<char>(stream);
    h[4] = static_cast<char>(size >> 24);
    h[5] = static_cast<char>(size >> 16);
    h[6] = static_cast<char>(size >> 8);
    h[7] = static_cast<char>(size);
    return h;
}

Bytes Frame(uint8_t stream, const Bytes &payload)
{
    return Header(stream, static_cast<uint32_t>(payload.size())) + payload;
}

struct Slice {
    int stream;
    const uint8_t *data;
    size_t len;
    Bytes bytes; // a copy, when len <= kKeepMax
};

// Larger slices are only appended to the stream's output, to keep the
// limit-sized test's memory down.
constexpr size_t kKeepMax = 65536;

// Records every slice; asks to stop at the slice numbered stop_at (counted
// over the collector's life), or at every slice with stop_every.
struct Collector {
    std::vector<Slice> slices;
    Bytes out[4];
    long stop_at = -1;
    bool stop_every = false;
    std::mt19937 *rng = nullptr; // when set, stops at random
};

int Collect(void *arg, enum ws_frames_stream stream, const uint8_t *data, size_t len)
{
    auto *c = static_cast<Collector *>(arg);
    EXPECT_GT(len, 0u);
    EXPECT_TRUE(stream == WS_FRAMES_STDOUT || stream == WS_FRAMES_STDERR ||
                stream == WS_FRAMES_SYSTEMERR);
    c->out[stream].append(reinterpret_cast<const char *>(data), len);
    c->slices.push_back(
        {stream, data, len,
         len <= kKeepMax ? Bytes(reinterpret_cast<const char *>(data), len) : Bytes()});
    if (c->stop_every)
        return 1;
    if (c->rng && (*c->rng)() % 4 == 0)
        return 1;
    return static_cast<long>(c->slices.size()) - 1 == c->stop_at ? 1 : 0;
}

ssize_t Feed(ws_frames *d, const Bytes &in, Collector *c)
{
    return ws_frames_feed(d, in.data(), in.size(), Collect, c);
}

const uint8_t *At(const Bytes &buf, size_t off)
{
    return reinterpret_cast<const uint8_t *>(buf.data()) + off;
}

TEST(Frames, HandMadeSequenceGivesExactSlicesIntoTheCallersBuffer)
{
    Bytes in =
        Frame(1, "hello") + Frame(2, "err") + Frame(1, "") + Frame(3, "boom") + Frame(1, "!");
    ws_frames d;
    ws_frames_init(&d, false);
    Collector c;
    ASSERT_EQ(Feed(&d, in, &c), static_cast<ssize_t>(in.size()));
    ASSERT_EQ(c.slices.size(), 4u);
    EXPECT_EQ(c.slices[0].stream, WS_FRAMES_STDOUT);
    EXPECT_EQ(c.slices[0].bytes, "hello");
    EXPECT_EQ(c.slices[0].data, At(in, 8));
    EXPECT_EQ(c.slices[1].stream, WS_FRAMES_STDERR);
    EXPECT_EQ(c.slices[1].bytes, "err");
    EXPECT_EQ(c.slices[1].data, At(in, 8 + 5 + 8));
    EXPECT_EQ(c.slices[2].stream, WS_FRAMES_SYSTEMERR);
    EXPECT_EQ(c.slices[2].bytes, "boom");
    EXPECT_EQ(c.slices[2].data, At(in, 8 + 5 + 8 + 3 + 8 + 8));
    EXPECT_EQ(c.slices[3].stream, WS_FRAMES_STDOUT);
    EXPECT_EQ(c.slices[3].bytes, "!");
    EXPECT_EQ(ws_frames_total(&d, WS_FRAMES_STDOUT), 6u);
    EXPECT_EQ(ws_frames_total(&d, WS_FRAMES_STDERR), 3u);
    EXPECT_EQ(ws_frames_total(&d, WS_FRAMES_SYSTEMERR), 4u);
    EXPECT_EQ(ws_frames_total(&d, static_cast<ws_frames_stream>(0)), 0u);
    EXPECT_EQ(ws_frames_total(&d, static_cast<ws_frames_stream>(4)), 0u);
    EXPECT_EQ(ws_frames_eof(&d), 0);
}

TEST(Frames, EmptyInputAndZeroLengthFramesDeliverNothing)
{
    ws_frames d;
    ws_frames_init(&d, false);
    Collector c;
    EXPECT_EQ(ws_frames_feed(&d, nullptr, 0, Collect, &c), 0);
    Bytes in = Frame(1, "") + Frame(2, "") + Frame(3, "");
    EXPECT_EQ(Feed(&d, in, &c), static_cast<ssize_t>(in.size()));
    EXPECT_TRUE(c.slices.empty());
    EXPECT_EQ(ws_frames_eof(&d), 0);
}

TEST(Frames, BytesThatLookLikeHeadersInsideAPayloadArePayload)
{
    // A valid stderr header, a bad header and a huge size, all as stdout
    // payload.
    Bytes payload = Frame(2, "x") + Header(9, 1) + Header(1, 0xffffffffu) + "tail";
    Bytes in = Frame(1, payload) + Frame(2, "e");
    ws_frames d;
    ws_frames_init(&d, false);
    Collector c;
    ASSERT_EQ(Feed(&d, in, &c), static_cast<ssize_t>(in.size()));
    EXPECT_EQ(c.out[1], payload);
    EXPECT_EQ(c.out[2], "e");
    ASSERT_EQ(c.slices.size(), 2u);
}

TEST(Frames, HeaderSplitAtEveryOffset)
{
    // Every split of the input into three parts: each header boundary and
    // payload boundary falls at every possible offset of a feed.
    Bytes in = Frame(1, "abc") + Frame(2, "") + Frame(2, "defgh") + Frame(3, "i");
    for (size_t i = 0; i <= in.size(); i++) {
        for (size_t j = i; j <= in.size(); j++) {
            Bytes parts[3] = {in.substr(0, i), in.substr(i, j - i), in.substr(j)};
            ws_frames d;
            ws_frames_init(&d, false);
            Collector c;
            for (const Bytes &part : parts) {
                size_t before = c.slices.size();
                ASSERT_EQ(Feed(&d, part, &c), static_cast<ssize_t>(part.size()));
                for (size_t k = before; k < c.slices.size(); k++) {
                    // Zero-copy: every slice lies inside the part just fed.
                    EXPECT_GE(c.slices[k].data, At(part, 0));
                    EXPECT_LE(c.slices[k].data + c.slices[k].len, At(part, part.size()));
                }
            }
            EXPECT_EQ(c.out[1], "abc") << i << "," << j;
            EXPECT_EQ(c.out[2], "defgh") << i << "," << j;
            EXPECT_EQ(c.out[3], "i") << i << "," << j;
            EXPECT_EQ(ws_frames_eof(&d), 0);
        }
    }
}

TEST(Frames, OneByteAtATime)
{
    Bytes in = Frame(1, "ab") + Frame(2, "") + Frame(2, "cde");
    ws_frames d;
    ws_frames_init(&d, false);
    Collector c;
    for (size_t i = 0; i < in.size(); i++) {
        size_t before = c.slices.size();
        ASSERT_EQ(ws_frames_feed(&d, in.data() + i, 1, Collect, &c), 1);
        // Header bytes deliver nothing; each payload byte is its own slice.
        bool payload = (i >= 8 && i < 10) || i >= 26;
        EXPECT_EQ(c.slices.size(), before + (payload ? 1 : 0)) << i;
        EXPECT_EQ(ws_frames_eof(&d), (i == 9 || i == 17 || i == 28) ? 0 : -EPROTO) << i;
    }
    EXPECT_EQ(c.out[1], "ab");
    EXPECT_EQ(c.out[2], "cde");
    EXPECT_EQ(c.slices.size(), 5u);
}

TEST(Frames, StopAndResumeAtEverySlice)
{
    // Fed in chunks that cut payloads, so that slices end both inside and
    // at the end of frames, before zero-length frames and before headers.
    Bytes in = Frame(1, "0123456789") + Frame(2, "ab") + Frame(1, "") + Frame(3, "xyz") +
               Frame(2, "cdefghijkl") + Frame(1, "m");
    const size_t chunk = 7;

    // First without stopping, to count the slices.
    size_t count;
    {
        ws_frames d;
        ws_frames_init(&d, false);
        Collector c;
        for (size_t off = 0; off < in.size(); off += chunk) {
            Bytes part = in.substr(off, chunk);
            ASSERT_EQ(Feed(&d, part, &c), static_cast<ssize_t>(part.size()));
        }
        count = c.slices.size();
        ASSERT_GT(count, 6u);
    }

    for (size_t stop = 0; stop < count; stop++) {
        ws_frames d;
        ws_frames_init(&d, false);
        Collector c;
        c.stop_at = static_cast<long>(stop);
        bool stopped = false;
        for (size_t off = 0; off < in.size(); off += chunk) {
            Bytes part = in.substr(off, chunk);
            size_t pos = 0;
            while (pos < part.size()) {
                size_t before = c.slices.size();
                ssize_t n = ws_frames_feed(&d, part.data() + pos, part.size() - pos, Collect, &c);
                ASSERT_GE(n, 0);
                if (before <= stop && c.slices.size() > stop) {
                    // Stopped: exactly after the slice that asked to stop
                    // (which may also be the end of the input).
                    ASSERT_FALSE(stopped);
                    stopped = true;
                    ASSERT_EQ(c.slices.size() - 1, stop) << "a slice after the stop";
                    const Slice &last = c.slices.back();
                    EXPECT_EQ(At(part, pos + n), last.data + last.len);
                } else {
                    ASSERT_EQ(static_cast<size_t>(n), part.size() - pos);
                }
                pos += n;
            }
        }
        EXPECT_TRUE(stopped) << stop;
        EXPECT_EQ(c.slices.size(), count);
        EXPECT_EQ(c.out[1], "0123456789m") << stop;
        EXPECT_EQ(c.out[2], "abcdefghijkl") << stop;
        EXPECT_EQ(c.out[3], "xyz") << stop;
        EXPECT_EQ(ws_frames_eof(&d), 0);
    }
}

TEST(Frames, StoppingDoesNotConsumeTheNextHeader)
{
    Bytes in = Frame(1, "hello") + Frame(2, "") + Frame(2, "x");
    ws_frames d;
    ws_frames_init(&d, false);
    Collector c;
    c.stop_every = true;
    ASSERT_EQ(Feed(&d, in, &c), 8 + 5);
    EXPECT_EQ(ws_frames_eof(&d), 0);
    // The rest: two headers consumed silently, then the slice that stops.
    Bytes rest = in.substr(13);
    ASSERT_EQ(Feed(&d, rest, &c), static_cast<ssize_t>(rest.size()));
    ASSERT_EQ(c.slices.size(), 2u);
    EXPECT_EQ(c.out[2], "x");
}

TEST(Frames, StopAtEverySliceFeedsOneSliceAtATime)
{
    Bytes in = Frame(1, "ab") + Frame(2, "cd") + Frame(1, "") + Frame(3, "e");
    ws_frames d;
    ws_frames_init(&d, false);
    Collector c;
    c.stop_every = true;
    std::vector<ssize_t> returns;
    for (size_t pos = 0; pos < in.size();) {
        ssize_t n = ws_frames_feed(&d, in.data() + pos, in.size() - pos, Collect, &c);
        ASSERT_GT(n, 0);
        returns.push_back(n);
        pos += n;
    }
    EXPECT_EQ(returns, (std::vector<ssize_t>{10, 10, 17}));
    EXPECT_EQ(c.slices.size(), 3u);
}

// One protocol error case: `good` is fed and delivered first, then `bad`
// fails as a whole with no further callback.
void ExpectProtocolError(const Bytes &bad)
{
    Bytes good = Frame(1, "ok");
    Bytes in = good + bad + Frame(1, "never");
    ws_frames d;
    ws_frames_init(&d, false);
    Collector c;
    EXPECT_EQ(Feed(&d, in, &c), -EPROTO);
    ASSERT_EQ(c.slices.size(), 1u);
    EXPECT_EQ(c.slices[0].bytes, "ok");
    // Failed for good: valid input is refused too.
    EXPECT_EQ(Feed(&d, Frame(1, "more"), &c), -EPROTO);
    EXPECT_EQ(ws_frames_feed(&d, nullptr, 0, Collect, &c), -EPROTO);
    EXPECT_EQ(c.slices.size(), 1u);
    EXPECT_EQ(ws_frames_eof(&d), -EPROTO);
    EXPECT_EQ(ws_frames_total(&d, WS_FRAMES_STDOUT), 2u);

    // Split byte by byte: the byte that completes the header fails.
    ws_frames_init(&d, false);
    Collector c2;
    ASSERT_EQ(Feed(&d, good, &c2), static_cast<ssize_t>(good.size()));
    for (size_t i = 0; i < WS_FRAMES_HEADER_LEN; i++)
        EXPECT_EQ(ws_frames_feed(&d, bad.data() + i, 1, Collect, &c2),
                  i + 1 < WS_FRAMES_HEADER_LEN ? 1 : -EPROTO)
            << i;
    EXPECT_EQ(c2.slices.size(), 1u);
    EXPECT_EQ(ws_frames_eof(&d), -EPROTO);

    // init resets a failed demultiplexer.
    ws_frames_init(&d, false);
    EXPECT_EQ(ws_frames_eof(&d), 0);
    EXPECT_EQ(ws_frames_total(&d, WS_FRAMES_STDOUT), 0u);
    Collector c3;
    EXPECT_EQ(Feed(&d, good, &c3), static_cast<ssize_t>(good.size()));
    EXPECT_EQ(c3.out[1], "ok");
}

TEST(Frames, UnknownStreamTypesAreProtocolErrors)
{
    for (int type : {4, 5, 0x7f, 0x80, 0xff, int('H')}) {
        SCOPED_TRACE(type);
        ExpectProtocolError(Frame(static_cast<uint8_t>(type), "payload"));
    }
}

TEST(Frames, StdinFramesAreProtocolErrors)
{
    ExpectProtocolError(Frame(0, "payload"));
    // A zero-filled stream reads as "stdin, 0 bytes": refused, not skipped.
    ExpectProtocolError(Bytes(WS_FRAMES_HEADER_LEN, '\0'));
}

TEST(Frames, NonZeroPaddingIsAProtocolError)
{
    for (size_t pad = 1; pad <= 3; pad++) {
        for (int value : {1, 0x80, 0xff}) {
            SCOPED_TRACE(std::to_string(pad) + ":" + std::to_string(value));
            Bytes bad = Frame(1, "payload");
            bad[pad] = static_cast<char>(value);
            ExpectProtocolError(bad);
        }
    }
}

TEST(Frames, SizesAboveTheLimitAreProtocolErrors)
{
    ExpectProtocolError(Header(1, WS_FRAMES_PAYLOAD_MAX + 1) + "x");
    ExpectProtocolError(Header(2, 0x80000000u) + "x");
    ExpectProtocolError(Header(3, 0xffffffffu) + "x");
}

TEST(Frames, APayloadOfExactlyTheLimitIsDelivered)
{
    Bytes in = Header(2, WS_FRAMES_PAYLOAD_MAX);
    in.resize(in.size() + WS_FRAMES_PAYLOAD_MAX, 'z');
    in += Frame(1, "after");
    ws_frames d;
    ws_frames_init(&d, false);
    Collector c;
    // Fed in two parts so the limit is also met across a feed.
    size_t half = WS_FRAMES_HEADER_LEN + WS_FRAMES_PAYLOAD_MAX / 2;
    ASSERT_EQ(ws_frames_feed(&d, in.data(), half, Collect, &c), static_cast<ssize_t>(half));
    EXPECT_EQ(ws_frames_eof(&d), -EPROTO);
    ASSERT_EQ(ws_frames_feed(&d, in.data() + half, in.size() - half, Collect, &c),
              static_cast<ssize_t>(in.size() - half));
    EXPECT_EQ(ws_frames_total(&d, WS_FRAMES_STDERR), WS_FRAMES_PAYLOAD_MAX);
    EXPECT_EQ(c.out[2].size(), WS_FRAMES_PAYLOAD_MAX);
    EXPECT_EQ(c.out[2].find_first_not_of('z'), Bytes::npos);
    EXPECT_EQ(c.out[1], "after");
    EXPECT_EQ(ws_frames_eof(&d), 0);
}

TEST(Frames, LengthsAboveSsizeMaxAreRefusedWithoutConsuming)
{
    ws_frames d;
    ws_frames_init(&d, false);
    Collector c;
    Bytes one = Frame(1, "a");
    ASSERT_EQ(ws_frames_feed(&d, one.data(), 3, Collect, &c), 3);
    EXPECT_EQ(ws_frames_feed(&d, one.data(), SIZE_MAX, Collect, &c), -EINVAL);
    EXPECT_EQ(ws_frames_feed(&d, one.data(), static_cast<size_t>(SSIZE_MAX) + 1, Collect, &c),
              -EINVAL);
    // Nothing changed: the rest of the frame completes it.
    ASSERT_EQ(ws_frames_feed(&d, one.data() + 3, one.size() - 3, Collect, &c),
              static_cast<ssize_t>(one.size() - 3));
    EXPECT_EQ(c.out[1], "a");
    EXPECT_EQ(ws_frames_eof(&d), 0);
    ws_frames raw;
    ws_frames_init(&raw, true);
    EXPECT_EQ(ws_frames_feed(&raw, one.data(), SIZE_MAX, Collect, &c), -EINVAL);
    EXPECT_EQ(c.slices.size(), 1u);
}

TEST(Frames, EofInsideAHeaderOrAPayloadIsATruncatedStream)
{
    Bytes in = Frame(1, "abc") + Frame(2, "") + Frame(2, "de");
    for (size_t cut = 0; cut <= in.size(); cut++) {
        ws_frames d;
        ws_frames_init(&d, false);
        Collector c;
        ASSERT_EQ(ws_frames_feed(&d, in.data(), cut, Collect, &c), static_cast<ssize_t>(cut));
        bool boundary = cut == 0 || cut == 11 || cut == 19 || cut == in.size();
        EXPECT_EQ(ws_frames_eof(&d), boundary ? 0 : -EPROTO) << cut;
        // eof changes nothing: the stream can still go on.
        Bytes rest = in.substr(cut);
        ASSERT_EQ(Feed(&d, rest, &c), static_cast<ssize_t>(rest.size()));
        EXPECT_EQ(ws_frames_eof(&d), 0);
        EXPECT_EQ(c.out[1], "abc");
        EXPECT_EQ(c.out[2], "de");
    }
}

TEST(Frames, RawModePassesEverythingToStdout)
{
    ws_frames d;
    ws_frames_init(&d, true);
    Collector c;
    c.stop_every = true; // stopping after the only slice consumes it all
    Bytes in = Frame(2, "not a frame") + Header(9, 0xffffffffu) + Bytes(5, '\0');
    ASSERT_EQ(Feed(&d, in, &c), static_cast<ssize_t>(in.size()));
    ASSERT_EQ(c.slices.size(), 1u);
    EXPECT_EQ(c.slices[0].stream, WS_FRAMES_STDOUT);
    EXPECT_EQ(c.slices[0].data, At(in, 0));
    EXPECT_EQ(c.slices[0].bytes, in);
    EXPECT_EQ(ws_frames_feed(&d, nullptr, 0, Collect, &c), 0);
    Bytes half = Header(1, 10).substr(0, 3);
    ASSERT_EQ(Feed(&d, half, &c), 3);
    EXPECT_EQ(c.slices.size(), 2u);
    EXPECT_EQ(c.out[1], in + half);
    EXPECT_EQ(c.out[2], "");
    EXPECT_EQ(ws_frames_total(&d, WS_FRAMES_STDOUT), in.size() + 3);
    EXPECT_EQ(ws_frames_total(&d, WS_FRAMES_STDERR), 0u);
    EXPECT_EQ(ws_frames_eof(&d), 0);
}

// Random frames (sizes 0..100000 on stdout and stderr, payloads salted with
// fake headers), random chunk sizes and random stops: the reassembled
// streams equal what was framed.
TEST(Frames, RandomFramesRandomChunksRandomStops)
{
    std::mt19937 rng(20240611);
    for (int round = 0; round < 64; round++) {
        SCOPED_TRACE(round);
        Bytes wire, want[4];
        int frames = 1 + static_cast<int>(rng() % 60);
        for (int f = 0; f < frames; f++) {
            uint8_t stream = 1 + rng() % 2;
            size_t size;
            switch (rng() % 4) {
            case 0:
                size = 0;
                break;
            case 1:
                size = rng() % 16;
                break;
            default:
                size = rng() % 100001;
                break;
            }
            Bytes payload(size, '\0');
            for (char &ch : payload)
                ch = static_cast<char>(rng());
            // Plant fake headers, valid-looking and not.
            for (size_t k = 0; size >= WS_FRAMES_HEADER_LEN && k < 4; k++) {
                Bytes fake = rng() % 2 ? Header(1 + rng() % 3, static_cast<uint32_t>(rng() % 64))
                                       : Header(static_cast<uint8_t>(rng()), rng());
                payload.replace(rng() % (size - WS_FRAMES_HEADER_LEN + 1), fake.size(), fake);
            }
            want[stream] += payload;
            wire += Frame(stream, payload);
        }

        ws_frames d;
        ws_frames_init(&d, false);
        Collector c;
        bool stops = round % 2 == 1;
        if (stops)
            c.rng = &rng;
        for (size_t off = 0; off < wire.size();) {
            size_t chunk;
            switch (rng() % 4) {
            case 0:
                chunk = 1 + rng() % 8;
                break;
            case 1:
            case 2:
                chunk = 1 + rng() % 4096;
                break;
            default:
                chunk = 1 + rng() % 300000;
                break;
            }
            if (chunk > wire.size() - off)
                chunk = wire.size() - off;
            // A private copy, so a slice pointing anywhere but into this
            // chunk would show as wrong bytes under ASan or in the output.
            Bytes part = wire.substr(off, chunk);
            for (size_t pos = 0; pos < part.size();) {
                size_t before = c.slices.size();
                ssize_t n = ws_frames_feed(&d, part.data() + pos, part.size() - pos, Collect, &c);
                ASSERT_GE(n, 0);
                for (size_t k = before; k < c.slices.size(); k++) {
                    ASSERT_GE(c.slices[k].data, At(part, pos));
                    ASSERT_LE(c.slices[k].data + c.slices[k].len, At(part, pos + n));
                }
                if (static_cast<size_t>(n) < part.size() - pos) {
                    ASSERT_TRUE(stops);
                    const Slice &last = c.slices.back();
                    ASSERT_EQ(last.data + last.len, At(part, pos + n));
                }
                pos += n;
            }
            off += chunk;
            // Slices need not be kept: only their bytes are compared.
            c.slices.clear();
        }
        EXPECT_EQ(ws_frames_eof(&d), 0);
        EXPECT_TRUE(c.out[1] == want[1]) << c.out[1].size() << " vs " << want[1].size();
        EXPECT_TRUE(c.out[2] == want[2]) << c.out[2].size() << " vs " << want[2].size();
        EXPECT_TRUE(c.out[3].empty());
        EXPECT_EQ(ws_frames_total(&d, WS_FRAMES_STDOUT), want[1].size());
        EXPECT_EQ(ws_frames_total(&d, WS_FRAMES_STDERR), want[2].size());
    }
}

} // namespace
