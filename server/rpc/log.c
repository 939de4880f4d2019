/* JSON log lines on stderr (see log.h). */
#include "server/rpc/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/base/time.h"

static const char *const level_names[] = {"error", "info", "debug"};

void ws_log_escape(char *dst, size_t size, const char *src)
{
    size_t n = 0;
    const unsigned char *p = (const unsigned char *)(src ? src : "");

    if (size == 0)
        return;
    for (; *p; p++) {
        char esc[8];
        size_t len;

        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            len = 2;
        } else if (*p < 0x20 || *p == 0x7f) {
            snprintf(esc, sizeof(esc), "\\u%04x", *p);
            len = 6;
        } else {
            esc[0] = (char)*p;
            len = 1;
        }
        if (n + len >= size)
            break;
        memcpy(dst + n, esc, len);
        n += len;
    }
    /* Never end inside a UTF-8 sequence: a JSON parser would refuse it. */
    while (n > 0 && ((unsigned char)dst[n - 1] & 0xc0) == 0x80 && *p)
        n--;
    if (n > 0 && *p && ((unsigned char)dst[n - 1] & 0xc0) == 0xc0)
        n--;
    dst[n] = '\0';
}

void ws_log_json(int level, const char *event, const char *fields_json)
{
    char stamp[32];
    int64_t now = ws_wall_ms();
    time_t sec = (time_t)(now / 1000);
    struct tm tm;

    if (level < WS_RPC_LOG_ERROR || level > WS_RPC_LOG_DEBUG)
        level = WS_RPC_LOG_ERROR;
    gmtime_r(&sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    /* One fprintf: stderr is unbuffered, and glibc writes a single
     * formatted call under the stream's lock. */
    fprintf(stderr, "{\"ts\":\"%s.%03ldZ\",\"level\":\"%s\",\"event\":\"%s\",\"fields\":%s}\n",
            stamp, (long)(now % 1000), level_names[level], event,
            fields_json && fields_json[0] ? fields_json : "{}");
}

void ws_log_msg(int level, const char *event, const char *fmt, ...)
{
    char text[WS_LOG_LINE_MAX / 2], esc[WS_LOG_LINE_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    memcpy(esc, "{\"message\":\"", 12);
    ws_log_escape(esc + 12, sizeof(esc) - 14, text);
    /* The escape stops 2 bytes short of the end: room for the close. */
    size_t n = strlen(esc);
    memcpy(esc + n, "\"}", 3);
    ws_log_json(level, event, esc);
}
