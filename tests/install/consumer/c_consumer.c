/* A C program built outside stoker's tree against the installed C ABI (stoker::c, tests/install/install_test.py):
 * the library it loads speaks the version its header names, and refuses a flag it does not know with a message. */
#include <stdio.h>
#include <string.h>

#include "stoker/c_api.h"

int main(void) {
  const char* argv[] = {"--no-such-flag=1"};
  int version = stoker_c_api_version();
  if (version != STOKER_C_API_VERSION) {
    fprintf(stderr, "c_consumer: libstoker_c.so speaks version %d, stoker/c_api.h %d\n", version, STOKER_C_API_VERSION);
    return 1;
  }
  if (stoker_loader_validate(1, argv) == 0 || strstr(stoker_last_error(), "no-such-flag") == NULL) {
    fprintf(stderr, "c_consumer: an unknown flag was not refused by name: '%s'\n", stoker_last_error());
    return 1;
  }
  printf("ok C ABI version %d\n", version);
  return 0;
}
