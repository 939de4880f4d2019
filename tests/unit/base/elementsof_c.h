/* WS_ELEMENTSOF as C sees it: the C form of the macro is not the C++ one,
 * so base_test.cc asks these functions, compiled as C. */
#ifndef WS_TESTS_ELEMENTSOF_C_H
#define WS_TESTS_ELEMENTSOF_C_H

#include <stddef.h>

size_t ws_test_elementsof_ints(void);
size_t ws_test_elementsof_structs(void);
size_t ws_test_elementsof_rows(void);
size_t ws_test_elementsof_string(void);
size_t ws_test_elementsof_static_bound(void);

#endif
