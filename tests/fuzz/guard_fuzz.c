/* The shell guard's command-string tokenizer and allowlist match
 * (server/guard/guard.h): the input is the command line of a request, run
 * under the policy of the guard's corpus (tests/corpus/commands/README.md:
 * host, allowlist ls cat echo git), under an isolated provider's (the
 * denylist alone, with a terminal) and under a foreign-root one (a
 * container's, where nothing is resolved).
 *
 * Checked besides memory safety: an accepted command line holds no
 * control byte but tab, its words hold none either and are no longer in
 * total than the line; argv[0] is the canonical path of an allowlisted
 * program (host) or an allowlist entry spelled exactly (foreign root); the
 * cwd is "."; the environment starts with the fixed PATH.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "server/guard/guard.h"
#include "tests/fuzz/fuzz.h"

#define PATH "/usr/local/bin:/usr/bin:/bin"

static const char *const allowed[] = {"ls", "cat", "echo", "git"};
#define N_ALLOWED (sizeof(allowed) / sizeof(allowed[0]))

/* realpath of each allowlist entry found in PATH (NULL: not on this host). */
static char *canonical[N_ALLOWED];
static bool ready;

static void setup(void)
{
    static const char *const dirs[] = {"/usr/local/bin", "/usr/bin", "/bin"};

    for (size_t i = 0; i < N_ALLOWED; i++)
        for (size_t j = 0; j < sizeof(dirs) / sizeof(dirs[0]) && !canonical[i]; j++) {
            char path[PATH_MAX];
            strcpy(path, dirs[j]);
            strcat(path, "/");
            strcat(path, allowed[i]);
            canonical[i] = realpath(path, NULL);
        }
    ready = true;
}

static bool control_byte(unsigned char c)
{
    return (c < 0x20 && c != '\t') || c == 0x7f;
}

static void check_result(const struct ws_guard_result *res, const uint8_t *data, size_t size,
                         bool foreign)
{
    size_t words = 0;
    bool known = false;

    FUZZ_CHECK(res->argc >= 1 && res->argv[res->argc] == NULL, "argv has argc entries");
    for (size_t i = 0; i < size; i++)
        FUZZ_CHECK(!control_byte(data[i]), "accepted a command line with a control byte");
    for (size_t i = 0; i < res->argc; i++) {
        for (const char *p = res->argv[i]; *p; p++)
            FUZZ_CHECK(!control_byte((unsigned char)*p), "a word holds a control byte");
        if (i > 0)
            words += strlen(res->argv[i]);
    }
    FUZZ_CHECK(words <= size, "words longer than the command line");
    for (size_t i = 0; i < N_ALLOWED; i++) {
        if (foreign)
            known |= strcmp(res->argv[0], allowed[i]) == 0;
        else
            known |= canonical[i] && strcmp(res->argv[0], canonical[i]) == 0;
    }
    FUZZ_CHECK(known, "argv[0] is not an allowlisted program");
    FUZZ_CHECK(res->cwd && strcmp(res->cwd, ".") == 0, "cwd is not \".\"");
    FUZZ_CHECK(res->n_env >= 1 && res->envp[res->n_env] == NULL, "envp has n_env entries");
    bool path_set = false;
    for (size_t i = 0; i < res->n_env; i++)
        path_set |= strcmp(res->envp[i], "PATH=" PATH) == 0;
    FUZZ_CHECK(path_set, "PATH is not the policy's");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ws_guard_policy p = {
        .allowed = allowed,
        .n_allowed = N_ALLOWED,
        .path = PATH,
        .home = "/srv/ws/home",
    };
    struct ws_guard_request r = {
        .command = (const char *)data,
        .command_len = size,
    };

    if (!ready)
        setup();
    for (int mode = 0; mode < 3; mode++) {
        struct ws_diag d;
        struct ws_guard_result *res = NULL;
        int e;

        memset(&d, 0, sizeof(d));
        p.host = mode == 0;
        p.runtime_dir = mode == 0 ? "/srv/ws/run" : NULL;
        p.foreign_root = mode == 2;
        r.pty = mode == 1;
        e = ws_guard_check(&p, &r, &d, &res);
        if (e == 0) {
            FUZZ_CHECK(res != NULL, "success without a result");
            check_result(res, data, size, p.foreign_root);
            ws_guard_result_free(res);
        } else {
            FUZZ_CHECK(e < 0, "a positive error");
            FUZZ_CHECK(e != -EINVAL && e != -ENOMEM, "a policy error for a request");
            FUZZ_CHECK(memchr(d.message, '\0', sizeof(d.message)) != NULL, "message unterminated");
            FUZZ_CHECK(d.n_meta >= 0 && d.n_meta <= WS_DIAG_META_MAX, "metadata count");
            for (int i = 0; i < d.n_meta; i++)
                FUZZ_CHECK(memchr(d.value[i], '\0', sizeof(d.value[i])) != NULL,
                           "metadata unterminated");
        }
    }
    return 0;
}
