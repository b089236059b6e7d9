/* CHECK for the librdmacm C tests: a failed condition ends the program
 * with status 1, naming the condition, where it is and errno. */
#ifndef RVM_TESTS_CHECK_H
#define RVM_TESTS_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                    \
	do {                                                                        \
		if (!(c)) {                                                         \
			fprintf(stderr, "FAIL %s:%d: %s (errno %d %s)\n", __FILE__, \
				__LINE__, #c, errno, strerror(errno));              \
			exit(1);                                                    \
		}                                                                   \
	} while (0)

#endif
