#include "tests/unit/base/elementsof_c.h"

#include "server/base/macros.h"

static const int ints[] = {1, 2, 3, 4, 5, 6, 7};
static const struct {
    const char *name;
    int v;
} structs[] = {{"a", 1}, {"b", 2}, {"c", 3}};
static const double rows[5][2];
static const char string[] = "hello";

/* A constant expression: usable as an array bound and in _Static_assert. */
static char doubled[WS_ELEMENTSOF(ints) * 2];
_Static_assert(WS_ELEMENTSOF(structs) == 3, "WS_ELEMENTSOF is a constant expression");

size_t ws_test_elementsof_ints(void)
{
    return WS_ELEMENTSOF(ints);
}

size_t ws_test_elementsof_structs(void)
{
    return WS_ELEMENTSOF(structs);
}

size_t ws_test_elementsof_rows(void)
{
    return WS_ELEMENTSOF(rows) + 0 * (size_t)rows[0][0];
}

size_t ws_test_elementsof_string(void)
{
    return WS_ELEMENTSOF(string);
}

size_t ws_test_elementsof_static_bound(void)
{
    return sizeof(doubled);
}
