/* Fuzz harness of the cm_event record decoder (cmwire.c), built with ASan
 * and UBSan. Reads records from stdin: u32 length, then length bytes; for
 * each writes one line: rvm_decode_event's result (0 or an errno). rvtd/
 * dropin's FuzzCMEventDecoder and TestCMEventDecoderRandom drive it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cmwire.h"

int main(void)
{
	for (;;) {
		uint32_t len;
		if (fread(&len, 4, 1, stdin) != 1)
			return 0;
		if (len > 65536)
			return 2;
		/* An exact-size heap copy, so ASan sees any read past the end. */
		uint8_t *rec = malloc(len ? len : 1);
		if (len && fread(rec, 1, len, stdin) != len)
			return 2;
		struct rvm_event ev;
		int d = rvm_decode_event(rec, len, &ev);
		free(rec);
		printf("%d\n", d);
		fflush(stdout);
	}
}
