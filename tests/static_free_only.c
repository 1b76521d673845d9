/* Linked with libhakmem.a, and naming only free: the C library's strdup
 * allocates the strings (its malloc is whichever the executable has). The
 * archive must give the executable malloc with free, or the C library's
 * blocks reach hakmem's free (a review helper's program aborted so: "free
 * of 0x..., not allocated by hakmem"). No test helpers here: they would
 * name malloc themselves. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
    for (int i = 0; i < 1000; i++) {
        char *s = strdup("a string the C library allocates");
        if (s == NULL) return 1;
        free(s);
    }
    puts("ok");
    return 0;
}
