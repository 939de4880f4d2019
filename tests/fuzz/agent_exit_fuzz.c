/* The server's reading of an in-box agent's exit records
 * (ws_agent_parse_exit, server/agent/client.h): the input is the payload
 * of an EXITED frame, as a box's agent could send it.
 *
 * Checked besides memory safety, against a model written here from the
 * protocol's description (wire.h) rather than from the client's code: the
 * record is accepted exactly when the model accepts it (every field
 * whole, the known numbers 8 bytes each, the last of a repeated tag
 * counting, STATUS present and 0 or 1, CODE at most 255, a signaled one's
 * SIGNO a real signal) and then says what the model says; an accepted
 * record makes a consistent exit (an exit code only when not signaled, a
 * signal only when it is, OOM only on SIGKILL); a refused one leaves the
 * caller's record untouched; and an accepted record written again with
 * the wire writer reads back the same.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>

#include "server/agent/client.h"
#include "server/agent/wire.h"
#include "tests/fuzz/fuzz.h"

/* The tags an exit record is read for, and what the model holds of each. */
static const uint16_t tags[] = {
    WS_WIRE_T_STATUS, WS_WIRE_T_CODE,    WS_WIRE_T_SIGNO,  WS_WIRE_T_CORE,
    WS_WIRE_T_OOM,    WS_WIRE_T_USER_MS, WS_WIRE_T_SYS_MS, WS_WIRE_T_MAXRSS_KIB,
};
#define N_TAGS (sizeof(tags) / sizeof(tags[0]))

struct model {
    bool ok;
    bool seen[N_TAGS];
    uint64_t v[N_TAGS];
};

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* The protocol's rules, from the bytes up. */
static void model_read(const uint8_t *p, size_t len, struct model *m)
{
    size_t pos = 0;

    memset(m, 0, sizeof(*m));
    while (pos < len) {
        if (len - pos < WS_WIRE_FIELD_HEADER)
            return;
        uint16_t tag = (uint16_t)(p[pos] | p[pos + 1] << 8);
        uint32_t flen = (uint32_t)p[pos + 2] | (uint32_t)p[pos + 3] << 8 |
                        (uint32_t)p[pos + 4] << 16 | (uint32_t)p[pos + 5] << 24;
        pos += WS_WIRE_FIELD_HEADER;
        if (flen > len - pos)
            return;
        for (size_t i = 0; i < N_TAGS; i++) {
            if (tags[i] != tag)
                continue;
            if (flen != 8)
                return;
            m->seen[i] = true;
            m->v[i] = le64(p + pos);
        }
        pos += flen;
    }
    uint64_t status = m->seen[0] ? m->v[0] : 2;
    m->ok = status <= 1 && m->v[1] <= 255 && (status == 0 || (m->v[2] >= 1 && m->v[2] < NSIG));
}

static void check_against(const struct model *m, const struct ws_agent_exit *x)
{
    bool signaled = m->v[0] == 1;

    FUZZ_CHECK(x->exit.signaled == signaled, "signaled differs from STATUS");
    FUZZ_CHECK(x->exit.exit_code == (signaled ? 0 : (int)m->v[1]), "exit code differs from CODE");
    FUZZ_CHECK(x->exit.signal == (signaled ? (int)m->v[2] : 0), "signal differs from SIGNO");
    FUZZ_CHECK(x->exit.core_dumped == (m->v[3] != 0), "core differs from CORE");
    FUZZ_CHECK(x->oom_killed == (m->v[4] != 0 && signaled && m->v[2] == SIGKILL),
               "OOM differs from OOM on a SIGKILL");
    FUZZ_CHECK(x->exit.user_ms == m->v[5] && x->exit.sys_ms == m->v[6] &&
                   x->exit.max_rss_kib == m->v[7],
               "the usage differs from USER_MS, SYS_MS, MAXRSS_KIB");
}

static void check_consistent(const struct ws_agent_exit *x)
{
    if (x->exit.signaled) {
        FUZZ_CHECK(x->exit.exit_code == 0, "a signaled exit with an exit code");
        FUZZ_CHECK(x->exit.signal >= 1 && x->exit.signal < NSIG, "a signaled exit, no signal");
    } else {
        FUZZ_CHECK(x->exit.exit_code >= 0 && x->exit.exit_code <= 255, "an exit code past 255");
        FUZZ_CHECK(x->exit.signal == 0, "an exit with a signal");
        FUZZ_CHECK(!x->oom_killed, "an OOM kill that exited");
    }
    FUZZ_CHECK(!x->oom_killed || x->exit.signal == SIGKILL, "an OOM kill without SIGKILL");
}

/* The record as an agent would write it, read again. */
static void check_rewritten(const struct ws_agent_exit *x)
{
    uint8_t buf[WS_WIRE_HEADER + 16 * (WS_WIRE_FIELD_HEADER + 8)];
    struct ws_wire_out o;
    struct ws_agent_exit again;

    ws_wire_begin(&o, buf, sizeof(buf), WS_WIRE_EXITED, 1);
    ws_wire_put_u64(&o, WS_WIRE_T_STATUS, x->exit.signaled ? 1 : 0);
    ws_wire_put_u64(&o, WS_WIRE_T_CODE, (uint64_t)x->exit.exit_code);
    ws_wire_put_u64(&o, WS_WIRE_T_SIGNO, (uint64_t)x->exit.signal);
    ws_wire_put_u64(&o, WS_WIRE_T_CORE, x->exit.core_dumped);
    ws_wire_put_u64(&o, WS_WIRE_T_OOM, x->oom_killed);
    ws_wire_put_u64(&o, WS_WIRE_T_USER_MS, x->exit.user_ms);
    ws_wire_put_u64(&o, WS_WIRE_T_SYS_MS, x->exit.sys_ms);
    ws_wire_put_u64(&o, WS_WIRE_T_MAXRSS_KIB, x->exit.max_rss_kib);
    long n = ws_wire_end(&o);
    FUZZ_CHECK(n > WS_WIRE_HEADER, "writing the record again");
    FUZZ_CHECK(ws_agent_parse_exit(buf + WS_WIRE_HEADER, (size_t)n - WS_WIRE_HEADER, &again) == 0,
               "the record written again is refused");
    FUZZ_CHECK(
        again.exit.signaled == x->exit.signaled && again.exit.exit_code == x->exit.exit_code &&
            again.exit.signal == x->exit.signal && again.exit.core_dumped == x->exit.core_dumped &&
            again.oom_killed == x->oom_killed && again.exit.user_ms == x->exit.user_ms &&
            again.exit.sys_ms == x->exit.sys_ms && again.exit.max_rss_kib == x->exit.max_rss_kib,
        "the record written again reads back otherwise");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ws_agent_exit x, untouched;
    struct model m;
    int r;

    if (size > WS_WIRE_PAYLOAD_MAX)
        return 0;
    memset(&x, 0xa5, sizeof(x));
    memcpy(&untouched, &x, sizeof(x));
    r = ws_agent_parse_exit(data, size, &x);
    model_read(data, size, &m);
    FUZZ_CHECK(r == 0 || r == -EPROTO, "ws_agent_parse_exit: unexpected error");
    FUZZ_CHECK((r == 0) == m.ok, "accepted where the protocol refuses, or the other way");
    if (r < 0) {
        FUZZ_CHECK(memcmp(&x, &untouched, sizeof(x)) == 0, "a refused record wrote its result");
        return 0;
    }
    check_against(&m, &x);
    check_consistent(&x);
    check_rewritten(&x);
    return 0;
}
