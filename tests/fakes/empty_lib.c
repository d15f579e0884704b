/* empty_lib.c — a shared library with none of the functions wds looks up:
 * tools_startup installs it as libxml2.so.2 (and libxml2.so.16) on
 * LD_LIBRARY_PATH, so loading libxml2 must fail naming what is missing. */
__attribute__((visibility("default"))) int wds_fake_nothing_here(void);
int wds_fake_nothing_here(void) { return 0; }
