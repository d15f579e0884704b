/* test_fieldspec.c — wds_field_specs_parse: the documented example, every
 * option, blanks and case, and the errors (each naming field and option). */
#include <stdlib.h>

#include "test.h"
#include "wds/loader.h"

typedef struct parsed {
  wds_field_spec *specs;
  size_t count;
  char *storage;
  char err[1024]; /* wds_last_error() after a failure */
  int rc;
} parsed;

static void parse(parsed *p, const char *text) {
  memset(p, 0, sizeof *p);
  p->rc = wds_field_specs_parse(text, &p->specs, &p->count, &p->storage);
  if (p->rc != WDS_OK)
    snprintf(p->err, sizeof p->err, "%s", wds_last_error());
}

static void parsed_free(parsed *p) {
  free(p->specs);
  free(p->storage);
}

TEST(documented_example) {
  parsed p;
  parse(&p, "jpg;png:rgb:224,cls,npy:npy,txt:bytes");
  ASSERT_EQ_INT(p.rc, WDS_OK);
  ASSERT_STREQ(p.err, "");
  ASSERT_EQ_INT(p.count, 4);
  ASSERT_STREQ(p.specs[0].name, "jpg;png");
  ASSERT_EQ_INT(p.specs[0].decode, WDS_DECODE_AUTO);
  ASSERT_EQ_INT(p.specs[0].channels, 3);
  ASSERT_EQ_INT(p.specs[0].width, 224);
  ASSERT_EQ_INT(p.specs[0].height, 224);
  ASSERT_STREQ(p.specs[1].name, "cls");
  ASSERT_EQ_INT(p.specs[1].decode, WDS_DECODE_AUTO);
  ASSERT_EQ_INT(p.specs[1].channels, 0);
  ASSERT_EQ_INT(p.specs[1].width, 0);
  ASSERT_STREQ(p.specs[2].name, "npy");
  ASSERT_EQ_INT(p.specs[2].decode, WDS_DECODE_NPY);
  ASSERT_STREQ(p.specs[3].name, "txt");
  ASSERT_EQ_INT(p.specs[3].decode, WDS_DECODE_BYTES);
  /* Names live in the one storage block. */
  for (size_t i = 0; i < p.count; i++)
    ASSERT_TRUE(p.specs[i].name >= p.storage &&
                p.specs[i].name < p.storage + 64);
  parsed_free(&p);
}

TEST(options) {
  parsed p;
  parse(&p, " JPEG : L : 320x240 : image , seg.png:64X32, id:int ");
  ASSERT_EQ_INT(p.rc, WDS_OK);
  ASSERT_EQ_INT(p.count, 3);
  ASSERT_STREQ(p.specs[0].name, "jpeg");
  ASSERT_EQ_INT(p.specs[0].channels, 1);
  ASSERT_EQ_INT(p.specs[0].width, 320);
  ASSERT_EQ_INT(p.specs[0].height, 240);
  ASSERT_EQ_INT(p.specs[0].decode, WDS_DECODE_IMAGE);
  ASSERT_STREQ(p.specs[1].name, "seg.png");
  ASSERT_EQ_INT(p.specs[1].width, 64);
  ASSERT_EQ_INT(p.specs[1].height, 32);
  ASSERT_STREQ(p.specs[2].name, "id");
  ASSERT_EQ_INT(p.specs[2].decode, WDS_DECODE_INT);
  parsed_free(&p);

  parse(&p, "a:1,b:65536,c:1x65536");
  ASSERT_EQ_INT(p.rc, WDS_OK);
  ASSERT_EQ_INT(p.specs[0].width, 1);
  ASSERT_EQ_INT(p.specs[1].height, 65536);
  ASSERT_EQ_INT(p.specs[2].width, 1);
  ASSERT_EQ_INT(p.specs[2].height, 65536);
  parsed_free(&p);
}

/* Each bad text fails with WDS_ERR_INVALID, no allocations left, and a
 * message containing each of the given fragments. */
static int check_error(const char *text, const char *frag1, const char *frag2) {
  parsed p;
  parse(&p, text);
  int ok = p.rc == WDS_ERR_INVALID && p.specs == NULL && p.count == 0 &&
           p.storage == NULL && strstr(p.err, frag1) &&
           (!frag2 || strstr(p.err, frag2));
  if (!ok)
    printf("  text \"%s\": rc %d, err \"%s\" (wanted \"%s\", \"%s\")\n", text,
           p.rc, p.err, frag1, frag2 ? frag2 : "");
  parsed_free(&p);
  return ok;
}

TEST(errors) {
  ASSERT_TRUE(check_error("", "empty", NULL));
  ASSERT_TRUE(check_error("   ", "empty", NULL));
  ASSERT_TRUE(check_error("jpg,", "field 2", "empty name"));
  ASSERT_TRUE(check_error(",cls", "field 1", "empty name"));
  ASSERT_TRUE(check_error("jpg,:rgb", "field 2", "empty name"));
  ASSERT_TRUE(check_error("jpg;;png", "field 1", "empty extension"));
  ASSERT_TRUE(check_error("jpg;", "field 1", "empty extension"));
  ASSERT_TRUE(check_error("a b", "field 1", "blanks"));
  ASSERT_TRUE(check_error("x/y", "field 1", "'/'"));
  ASSERT_TRUE(check_error("jpg:rgb:foo", "field 1 (\"jpg:rgb:foo\")",
                          "unknown option \"foo\""));
  ASSERT_TRUE(check_error("cls,jpg:", "field 2", "empty option"));
  ASSERT_TRUE(check_error("jpg::rgb", "field 1", "empty option"));
  ASSERT_TRUE(check_error("jpg:0", "bad image size \"0\"", NULL));
  ASSERT_TRUE(check_error("jpg:65537", "bad image size", NULL));
  ASSERT_TRUE(check_error("jpg:99999999999999999999", "bad image size", NULL));
  ASSERT_TRUE(check_error("jpg:3x", "bad image size \"3x\"", NULL));
  ASSERT_TRUE(check_error("jpg:x3", "unknown option \"x3\"", NULL));
  ASSERT_TRUE(check_error("jpg:3x0", "bad image size", NULL));
  ASSERT_TRUE(check_error("jpg:3x4x5", "bad image size", NULL));
  ASSERT_TRUE(check_error("jpg:-3", "unknown option \"-3\"", NULL));
  ASSERT_TRUE(check_error("jpg:rgb:l", "duplicate channel option \"l\"", NULL));
  ASSERT_TRUE(check_error("jpg:rgb:RGB", "duplicate channel option", NULL));
  ASSERT_TRUE(
      check_error("jpg:224:128", "duplicate size option \"128\"", NULL));
  ASSERT_TRUE(
      check_error("x:npy:bytes", "duplicate decoder option \"bytes\"", NULL));
  ASSERT_TRUE(check_error("cls,CLS", "field 2", "duplicate field \"cls\""));
  ASSERT_TRUE(check_error("npy:npy:224", "need the image decoder", NULL));
  ASSERT_TRUE(check_error("txt:bytes:l", "need the image decoder", NULL));
}

TEST(null_arguments_and_the_last_error) {
  wds_field_spec *s = (wds_field_spec *)1;
  size_t n = 7;
  char *st = (char *)1;
  ASSERT_EQ_INT(wds_field_specs_parse(NULL, &s, &n, &st), WDS_ERR_INVALID);
  ASSERT_TRUE(s == NULL && n == 0 && st == NULL);
  ASSERT_STREQ(wds_last_error(), "field spec: NULL argument");
  ASSERT_EQ_INT(wds_field_specs_parse("jpg:zz", &s, &n, &st), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "field 1 (\"jpg:zz\")");
  /* a success leaves the last failure's text */
  ASSERT_EQ_INT(wds_field_specs_parse("cls", &s, &n, &st), WDS_OK);
  ASSERT_CONTAINS(wds_last_error(), "field 1 (\"jpg:zz\")");
  free(s);
  free(st);
}

int main(void) {
  RUN(documented_example);
  RUN(options);
  RUN(errors);
  RUN(null_arguments_and_the_last_error);
  return test_summary();
}
