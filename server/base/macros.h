/* Small macros every module may use.
 *
 *   WS_ELEMENTSOF(a)   the number of elements of the array a. Handing it a
 *                      pointer (an array parameter, or an array that decayed)
 *                      is a compile error, where the same division written out
 *                      by hand would quietly use the size of the pointer.
 */
#ifndef WS_BASE_MACROS_H
#define WS_BASE_MACROS_H

#include <stddef.h>

#ifdef __cplusplus
/* C++ (the tests) gets the same refusal from a template that binds only to
 * an array; extern "C++" lets an includer wrap this header in extern "C". */
extern "C++" {
template <typename T, size_t N> constexpr size_t ws_elementsof_(T (&)[N])
{
    return N;
}
}
#define WS_ELEMENTSOF(a) ws_elementsof_(a)
#else
/* An array and a pointer to its first element have different types; a
 * pointer and &p[0] have the same. The check sits in a struct inside sizeof
 * so that the whole stays a constant expression (usable in _Static_assert
 * and array bounds) and adds nothing at run time. */
#define WS_ELEMENTSOF(a)                                                                           \
    (sizeof(a) / sizeof((a)[0]) +                                                                  \
     0 * sizeof(struct {                                                                           \
         _Static_assert(!__builtin_types_compatible_p(__typeof__(a), __typeof__(&(a)[0])),         \
                        "WS_ELEMENTSOF needs an array, not a pointer");                            \
         char ws_elementsof_c_;                                                                    \
     }))
#endif

#endif
