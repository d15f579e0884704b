/* test_spec.c — shard spec expansion (shards/spec.c).
 *
 * The brace and spec tables between the GENERATED markers are the output of
 * tests/gen_brace_cases.py, which runs the real Python braceexpand 0.1.7 and
 * WebDataset's expand_urls(): regenerate them rather than editing by hand.
 * The rest covers @FILE lists, limits, hostile input and the API contract. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tests/test.h"
#include "wds/spec.h"

typedef struct brace_case {
  const char *pattern;
  size_t max_urls;
  int status;
  size_t count;
  const char *const *urls; /* count expected URLs (WDS_OK) */
  const char *msg;         /* part of the expected message (errors) */
} brace_case;

/* clang-format off */
/* BEGIN GENERATED BRACE CASES (tests/gen_brace_cases.py) */
static const brace_case brace_cases[] = {
    {"", 0, WDS_OK, 1,
     (const char *const[]){""},
     NULL},
    {"data.tar", 0, WDS_OK, 1,
     (const char *const[]){"data.tar"},
     NULL},
    {"pipe:curl -s http://x/a.tar", 0, WDS_OK, 1,
     (const char *const[]){"pipe:curl -s http://x/a.tar"},
     NULL},
    {"a-{0..3}.tar", 0, WDS_OK, 4,
     (const char *const[]){"a-0.tar", "a-1.tar", "a-2.tar", "a-3.tar"},
     NULL},
    {"shard-{000..012}.tar", 0, WDS_OK, 13,
     (const char *const[]){"shard-000.tar", "shard-001.tar", "shard-002.tar",
                           "shard-003.tar", "shard-004.tar", "shard-005.tar",
                           "shard-006.tar", "shard-007.tar", "shard-008.tar",
                           "shard-009.tar", "shard-010.tar", "shard-011.tar",
                           "shard-012.tar"},
     NULL},
    {"{07..10}", 0, WDS_OK, 4,
     (const char *const[]){"07", "08", "09", "10"},
     NULL},
    {"{1..010}", 0, WDS_OK, 10,
     (const char *const[]){"001", "002", "003", "004", "005", "006", "007",
                           "008", "009", "010"},
     NULL},
    {"{001..3}", 0, WDS_OK, 3,
     (const char *const[]){"001", "002", "003"},
     NULL},
    {"{0..0}", 0, WDS_OK, 1,
     (const char *const[]){"0"},
     NULL},
    {"{00..0}", 0, WDS_OK, 1,
     (const char *const[]){"00"},
     NULL},
    {"{0..00}", 0, WDS_OK, 1,
     (const char *const[]){"00"},
     NULL},
    {"{-0..05}", 0, WDS_OK, 6,
     (const char *const[]){"00", "01", "02", "03", "04", "05"},
     NULL},
    {"{-05..0}", 0, WDS_OK, 6,
     (const char *const[]){"-05", "-04", "-03", "-02", "-01", "000"},
     NULL},
    {"{-05..05..5}", 0, WDS_OK, 3,
     (const char *const[]){"-05", "000", "005"},
     NULL},
    {"{0..-0}", 0, WDS_OK, 1,
     (const char *const[]){"0"},
     NULL},
    {"{9..11}", 0, WDS_OK, 3,
     (const char *const[]){"9", "10", "11"},
     NULL},
    {"{098..101}", 0, WDS_OK, 4,
     (const char *const[]){"098", "099", "100", "101"},
     NULL},
    {"{0000..2}", 0, WDS_OK, 3,
     (const char *const[]){"0000", "0001", "0002"},
     NULL},
    {"{0..10..2}", 0, WDS_OK, 6,
     (const char *const[]){"0", "2", "4", "6", "8", "10"},
     NULL},
    {"{1..10..3}", 0, WDS_OK, 4,
     (const char *const[]){"1", "4", "7", "10"},
     NULL},
    {"{0..10..0}", 0, WDS_OK, 11,
     (const char *const[]){"0", "1", "2", "3", "4", "5", "6", "7", "8", "9",
                           "10"},
     NULL},
    {"{0..10..-3}", 0, WDS_OK, 4,
     (const char *const[]){"0", "3", "6", "9"},
     NULL},
    {"{10..0..3}", 0, WDS_OK, 4,
     (const char *const[]){"10", "7", "4", "1"},
     NULL},
    {"{10..0..-3}", 0, WDS_OK, 4,
     (const char *const[]){"10", "7", "4", "1"},
     NULL},
    {"{0..10..100}", 0, WDS_OK, 1,
     (const char *const[]){"0"},
     NULL},
    {"{0..10..007}", 0, WDS_OK, 2,
     (const char *const[]){"0", "7"},
     NULL},
    {"{-1..-10..4}", 0, WDS_OK, 3,
     (const char *const[]){"-1", "-5", "-9"},
     NULL},
    {"{5..1}", 0, WDS_OK, 5,
     (const char *const[]){"5", "4", "3", "2", "1"},
     NULL},
    {"{2..-1}", 0, WDS_OK, 4,
     (const char *const[]){"2", "1", "0", "-1"},
     NULL},
    {"{-3..3}", 0, WDS_OK, 7,
     (const char *const[]){"-3", "-2", "-1", "0", "1", "2", "3"},
     NULL},
    {"{-3..-1}", 0, WDS_OK, 3,
     (const char *const[]){"-3", "-2", "-1"},
     NULL},
    {"{-1..-3}", 0, WDS_OK, 3,
     (const char *const[]){"-1", "-2", "-3"},
     NULL},
    {"{3..-3..2}", 0, WDS_OK, 4,
     (const char *const[]){"3", "1", "-1", "-3"},
     NULL},
    {"{18446744073709551615..18446744073709551617}", 0, WDS_OK, 3,
     (const char *const[]){"18446744073709551615", "18446744073709551616",
                           "18446744073709551617"},
     NULL},
    {"{-9223372036854775809..-9223372036854775807}", 0, WDS_OK, 3,
     (const char *const[]){"-9223372036854775809", "-9223372036854775808",
                           "-9223372036854775807"},
     NULL},
    {"{99999999999999999999999999..1000000000000000000"
     "00000001..2}", 0, WDS_OK, 2,
     (const char *const[]){"99999999999999999999999999",
                           "100000000000000000000000001"},
     NULL},
    {"{0..5..99999999999999999999999999999999}", 0, WDS_OK, 1,
     (const char *const[]){"0"},
     NULL},
    {"{a..e}", 0, WDS_OK, 5,
     (const char *const[]){"a", "b", "c", "d", "e"},
     NULL},
    {"{e..a}", 0, WDS_OK, 5,
     (const char *const[]){"e", "d", "c", "b", "a"},
     NULL},
    {"{a..e..2}", 0, WDS_OK, 3,
     (const char *const[]){"a", "c", "e"},
     NULL},
    {"{a..g..-2}", 0, WDS_OK, 4,
     (const char *const[]){"a", "c", "e", "g"},
     NULL},
    {"{A..z..5}", 0, WDS_OK, 11,
     (const char *const[]){"A", "F", "K", "P", "U", "Z", "e", "j", "o", "t",
                           "y"},
     NULL},
    {"{Z..a}", 0, WDS_OK, 2,
     (const char *const[]){"Z", "a"},
     NULL},
    {"{a..Z}", 0, WDS_OK, 2,
     (const char *const[]){"a", "Z"},
     NULL},
    {"{x..C}", 0, WDS_OK, 48,
     (const char *const[]){"x", "w", "v", "u", "t", "s", "r", "q", "p", "o",
                           "n", "m", "l", "k", "j", "i", "h", "g", "f", "e",
                           "d", "c", "b", "a", "Z", "Y", "X", "W", "V", "U",
                           "T", "S", "R", "Q", "P", "O", "N", "M", "L", "K",
                           "J", "I", "H", "G", "F", "E", "D", "C"},
     NULL},
    {"{z..A..-25}", 0, WDS_OK, 3,
     (const char *const[]){"z", "a", "B"},
     NULL},
    {"{a..Z..3}", 0, WDS_OK, 1,
     (const char *const[]){"a"},
     NULL},
    {"{A..A}", 0, WDS_OK, 1,
     (const char *const[]){"A"},
     NULL},
    {"{a..b..0}", 0, WDS_OK, 2,
     (const char *const[]){"a", "b"},
     NULL},
    {"{a..z..100}", 0, WDS_OK, 1,
     (const char *const[]){"a"},
     NULL},
    {"{1..a}", 0, WDS_OK, 1,
     (const char *const[]){"{1..a}"},
     NULL},
    {"{a..1}", 0, WDS_OK, 1,
     (const char *const[]){"{a..1}"},
     NULL},
    {"{1..}", 0, WDS_OK, 1,
     (const char *const[]){"{1..}"},
     NULL},
    {"{..1}", 0, WDS_OK, 1,
     (const char *const[]){"{..1}"},
     NULL},
    {"{1..2..}", 0, WDS_OK, 1,
     (const char *const[]){"{1..2..}"},
     NULL},
    {"{1...2}", 0, WDS_OK, 1,
     (const char *const[]){"{1...2}"},
     NULL},
    {"{1..2..3..4}", 0, WDS_OK, 1,
     (const char *const[]){"{1..2..3..4}"},
     NULL},
    {"{aa..b}", 0, WDS_OK, 1,
     (const char *const[]){"{aa..b}"},
     NULL},
    {"{+1..3}", 0, WDS_OK, 1,
     (const char *const[]){"{+1..3}"},
     NULL},
    {"{1 ..3}", 0, WDS_OK, 1,
     (const char *const[]){"{1 ..3}"},
     NULL},
    {"{a}", 0, WDS_OK, 1,
     (const char *const[]){"{a}"},
     NULL},
    {"{}", 0, WDS_OK, 1,
     (const char *const[]){"{}"},
     NULL},
    {"{{}}", 0, WDS_OK, 1,
     (const char *const[]){"{{}}"},
     NULL},
    {"x{a}y", 0, WDS_OK, 1,
     (const char *const[]){"x{a}y"},
     NULL},
    {"{a..}", 0, WDS_OK, 1,
     (const char *const[]){"{a..}"},
     NULL},
    {"{-a..c}", 0, WDS_OK, 1,
     (const char *const[]){"{-a..c}"},
     NULL},
    {"{1..3\012}", 0, WDS_OK, 3,
     (const char *const[]){"1", "2", "3"},
     NULL},
    {"{a..c\012}", 0, WDS_OK, 3,
     (const char *const[]){"a", "b", "c"},
     NULL},
    {"{1..3\012\012}", 0, WDS_OK, 1,
     (const char *const[]){"{1..3\012\012}"},
     NULL},
    {"{a,b,c}", 0, WDS_OK, 3,
     (const char *const[]){"a", "b", "c"},
     NULL},
    {"{,a}", 0, WDS_OK, 2,
     (const char *const[]){"", "a"},
     NULL},
    {"{a,}", 0, WDS_OK, 2,
     (const char *const[]){"a", ""},
     NULL},
    {"{,}", 0, WDS_OK, 2,
     (const char *const[]){"", ""},
     NULL},
    {"{,,}", 0, WDS_OK, 3,
     (const char *const[]){"", "", ""},
     NULL},
    {"a{b,c}d{e,f}", 0, WDS_OK, 4,
     (const char *const[]){"abde", "abdf", "acde", "acdf"},
     NULL},
    {"{a,b}{1..3}", 0, WDS_OK, 6,
     (const char *const[]){"a1", "a2", "a3", "b1", "b2", "b3"},
     NULL},
    {"{1..2}{a..b}{x,y}", 0, WDS_OK, 8,
     (const char *const[]){"1ax", "1ay", "1bx", "1by", "2ax", "2ay", "2bx",
                           "2by"},
     NULL},
    {"index.html{,.backup}", 0, WDS_OK, 2,
     (const char *const[]){"index.html", "index.html.backup"},
     NULL},
    {"s3://bucket/{train,val}/{0000..0002}.tar", 0, WDS_OK, 6,
     (const char *const[]){"s3://bucket/train/0000.tar",
                           "s3://bucket/train/0001.tar",
                           "s3://bucket/train/0002.tar",
                           "s3://bucket/val/0000.tar",
                           "s3://bucket/val/0001.tar",
                           "s3://bucket/val/0002.tar"},
     NULL},
    {"python{2.{5..7},3.{2,3}}", 0, WDS_OK, 5,
     (const char *const[]){"python2.5", "python2.6", "python2.7", "python3.2",
                           "python3.3"},
     NULL},
    {"{a,{b,c}}", 0, WDS_OK, 3,
     (const char *const[]){"a", "b", "c"},
     NULL},
    {"{{a,b},{c,d}}{1,2}", 0, WDS_OK, 8,
     (const char *const[]){"a1", "a2", "b1", "b2", "c1", "c2", "d1", "d2"},
     NULL},
    {"{a{b,c}}", 0, WDS_OK, 2,
     (const char *const[]){"{ab}", "{ac}"},
     NULL},
    {"{a{1..3}b}", 0, WDS_OK, 3,
     (const char *const[]){"{a1b}", "{a2b}", "{a3b}"},
     NULL},
    {"{x,{1..3}{a,b}}", 0, WDS_OK, 7,
     (const char *const[]){"x", "1a", "1b", "2a", "2b", "3a", "3b"},
     NULL},
    {"{{{a}}}", 0, WDS_OK, 1,
     (const char *const[]){"{{{a}}}"},
     NULL},
    {"{a,{}}", 0, WDS_OK, 2,
     (const char *const[]){"a", "{}"},
     NULL},
    {"{a,{b}}", 0, WDS_OK, 2,
     (const char *const[]){"a", "{b}"},
     NULL},
    {"{{1..2},{a..b}}-{0..1}", 0, WDS_OK, 8,
     (const char *const[]){"1-0", "1-1", "2-0", "2-1", "a-0", "a-1", "b-0",
                           "b-1"},
     NULL},
    {"{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{"
     "{{{{{{{{{{{{{{{{}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}"
     "}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}", 0, WDS_OK, 1,
     (const char *const[]){"{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{"
                           "{{{{{{{{{{{{{{{{}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}"
                           "}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}"},
     NULL},
    {"{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{"
     "{{{{{{{{{{{{{{{{a,b}}}}}}}}}}}}}}}}}}}}}}}}}}}}}"
     "}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}", 0, WDS_OK, 2,
     (const char *const[]){"{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{"
                           "{{{{{{{{{{{{{{{a}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}"
                           "}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}",
                           "{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{"
                           "{{{{{{{{{{{{{{{b}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}"
                           "}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}"},
     NULL},
    {"}{", 0, WDS_OK, 1,
     (const char *const[]){"}{"},
     NULL},
    {"}{a}{", 0, WDS_OK, 1,
     (const char *const[]){"}{a}{"},
     NULL},
    {"a}b{c", 0, WDS_OK, 1,
     (const char *const[]){"a}b{c"},
     NULL},
    {"{a}}{", 0, WDS_OK, 1,
     (const char *const[]){"{a}}{"},
     NULL},
    {"}{{a,b}", 0, WDS_OK, 2,
     (const char *const[]){"}{a", "}{b"},
     NULL},
    {"\\{a,b\\}", 0, WDS_OK, 1,
     (const char *const[]){"{a,b}"},
     NULL},
    {"{a\\,b}", 0, WDS_OK, 1,
     (const char *const[]){"{a,b}"},
     NULL},
    {"{a\\,b,c}", 0, WDS_OK, 2,
     (const char *const[]){"a,b", "c"},
     NULL},
    {"{a,b\\}}", 0, WDS_OK, 2,
     (const char *const[]){"a", "b}"},
     NULL},
    {"x\\y", 0, WDS_OK, 1,
     (const char *const[]){"xy"},
     NULL},
    {"a\\\\b", 0, WDS_OK, 1,
     (const char *const[]){"a\\b"},
     NULL},
    {"a\\", 0, WDS_OK, 1,
     (const char *const[]){"a\\"},
     NULL},
    {"{a,b}\\", 0, WDS_OK, 2,
     (const char *const[]){"a\\", "b\\"},
     NULL},
    {"{1..3}\\\\", 0, WDS_OK, 3,
     (const char *const[]){"1\\", "2\\", "3\\"},
     NULL},
    {"{x\\\\\\\\y,b}", 0, WDS_OK, 2,
     (const char *const[]){"x\\y", "b"},
     NULL},
    {"{{a,b}\\\\}", 0, WDS_OK, 2,
     (const char *const[]){"{a}", "{b}"},
     NULL},
    {"{{a,b}\\\\\\\\}", 0, WDS_OK, 2,
     (const char *const[]){"{a\\}", "{b\\}"},
     NULL},
    {"{a\\\\,b}", 0, WDS_OK, 2,
     (const char *const[]){"a\\", "b"},
     NULL},
    {"\\\012{a,b}", 0, WDS_OK, 2,
     (const char *const[]){"\\\012a", "\\\012b"},
     NULL},
    {"{a,b\\\012}", 0, WDS_OK, 2,
     (const char *const[]){"a", "b\\\012"},
     NULL},
    {"{1\\..3}", 0, WDS_OK, 1,
     (const char *const[]){"{1..3}"},
     NULL},
    {"{1..3\\}}", 0, WDS_OK, 1,
     (const char *const[]){"{1..3}}"},
     NULL},
    {"\\{1..3\\}", 0, WDS_OK, 1,
     (const char *const[]){"{1..3}"},
     NULL},
    {"a::b", 0, WDS_OK, 1,
     (const char *const[]){"a::b"},
     NULL},
    {"${X}{1,2}", 0, WDS_OK, 2,
     (const char *const[]){"${X}1", "${X}2"},
     NULL},
    {"a-{0..3.tar", 0, WDS_ERR_SPEC, 0, NULL,
     "unbalanced brace at position 2 in \"a-{0..3.tar"
     "\""},
    {"{", 0, WDS_ERR_SPEC, 0, NULL, "unbalanced brace at position 0"},
    {"}", 0, WDS_ERR_SPEC, 0, NULL, "unbalanced brace at position 0"},
    {"a}", 0, WDS_ERR_SPEC, 0, NULL, "unbalanced brace at position 1"},
    {"{1{2,3}", 0, WDS_ERR_SPEC, 0, NULL, "unbalanced brace at position 0"},
    {"{a,b}}", 0, WDS_ERR_SPEC, 0, NULL, "unbalanced brace at position 5"},
    {"}{}", 0, WDS_ERR_SPEC, 0, NULL, "unbalanced brace at position 2"},
    {"x{a,b}y{", 0, WDS_ERR_SPEC, 0, NULL, "unbalanced brace at position 7"},
    {"\\{a,b}", 0, WDS_ERR_SPEC, 0, NULL, "unbalanced brace at position 5"},
    {"{a,b\\}", 0, WDS_ERR_SPEC, 0, NULL, "unbalanced brace at position 0"},
    {"{a,b}\\\\}", 0, WDS_ERR_SPEC, 0, NULL, "unbalanced brace at position 7"},
    {"{a,b}{1..3}", 6, WDS_OK, 6,
     (const char *const[]){"a1", "a2", "a3", "b1", "b2", "b3"},
     NULL},
    {"{a,b}{1..3}", 5, WDS_ERR_LIMIT, 0, NULL,
     "would make 6 URLs, over the limit of 5"},
    {"{0..9}", 1, WDS_ERR_LIMIT, 0, NULL,
     "would make 10 URLs, over the limit of 1"},
    {"x", 1, WDS_OK, 1,
     (const char *const[]){"x"},
     NULL},
    {"{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{"
     "{{{{{{{{{{{{{{{{{}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}"
     "}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}", 0, WDS_ERR_SPEC, 0, NULL,
     "braces nested more than 64 deep at position 64"},
    {"a{b,{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{"
     "{{{{{{{{{{{{{{{{{{{{{{{{{{}}}}}}}}}}}}}}}}}}}}}}"
     "}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}"
     "}", 0, WDS_ERR_SPEC, 0, NULL, "nested more than 64 deep at position 67"},
    {"{0..999999999}{0..999999999}", 0, WDS_ERR_LIMIT, 0, NULL,
     "would make 1000000000000000000 URLs, over the li"
     "mit of 10000000"},
    {"{0..10000000}", 0, WDS_ERR_LIMIT, 0, NULL,
     "would make 10000001 URLs, over the limit of 1000"
     "0000"},
    {"{0..99999999999999999999999999999}", 0, WDS_ERR_LIMIT, 0, NULL,
     "would make at least 18446744073709551615 URLs"},
    {"{0..999}{0..999}{0..999}{0..999}{0..999}{0..999}"
     "{0..999}{0..999}", 0, WDS_ERR_LIMIT, 0, NULL,
     "would make at least 18446744073709551615 URLs"},
    {"{a..z}{a..z}{a..z}{a..z}{a..z}{a..z}", 0, WDS_ERR_LIMIT, 0, NULL,
     "would make 308915776 URLs, over the limit of 100"
     "00000"},
    {"{{0..99},{0..99},{0..99},{0..99},{0..99},{0..99}"
     ",{0..99},{0..99},{0..99},{0..99},{0..99},{0..99}"
     ",{0..99},{0..99},{0..99},{0..99},{0..99},{0..99}"
     ",{0..99},{0..99},{0..99},{0..99},{0..99},{0..99}"
     ",{0..99},{0..99},{0..99},{0..99},{0..99},{0..99}"
     ",{0..99},{0..99},{0..99},{0..99},{0..99},{0..99}"
     ",{0..99},{0..99},{0..99},{0..99},{0..99},{0..99}"
     ",{0..99},{0..99},{0..99},{0..99},{0..99},{0..99}"
     ",{0..99},{0..99},{0..99},{0..99},{0..99},{0..99}"
     ",{0..99},{0..99},{0..99},{0..99},{0..99},{0..99}"
     ",{0..99},{0..99},{0..99},{0..99},{0..99},{0..99}"
     ",{0..99},{0..99},{0..99},{0..99},{0..99},{0..99}"
     ",{0..99},{0..99},{0..99},{0..99},{0..99},{0..99}"
     ",{0..99},{0..99},{0..99},{0..99},{0..99},{0..99}"
     ",{0..99},{0..99},{0..99},{0..99},{0..99},{0..99}"
     ",{0..99},{0..99},{0..99},{0..99},{0..99},{0..99}"
     ",{0..99},{0..99},{0..99},{0..99}}{0..999}", 1000, WDS_ERR_LIMIT, 0, NULL,
     "would make 10000000 URLs, over the limit of 1000"},
};

static const char *const spec_env[][2] = {
    {"WDS_ROOT", "/data/set"},
    {"WDS_SHARDS", "{000..002}"},
    {"WDS_LOOP", "${LOOP}"},
    {"WDS_A", "${B}"},
    {"WDS_B", "x{1,2}"},
    {"WDS_PAIR", "a::b"},
    {"WDS_EMPTY", ""},
    {"WDS_DBL", "${DBL}${DBL}"},
    {"WDS_ESC", "\\{q,r\\}"},
};
static const char *const spec_unset[] = {"WDS_NOPE"};

static const brace_case spec_cases[] = {
    {"${ROOT}/train-${SHARDS}.tar", 0, WDS_OK, 3,
     (const char *const[]){"/data/set/train-000.tar", "/data/set/train-001.tar",
                           "/data/set/train-002.tar"},
     NULL},
    {"${ROOT}/{train,val}-{0..1}.tar::${ROOT}/extra.ta"
     "r", 0, WDS_OK, 5,
     (const char *const[]){"/data/set/train-0.tar", "/data/set/train-1.tar",
                           "/data/set/val-0.tar", "/data/set/val-1.tar",
                           "/data/set/extra.tar"},
     NULL},
    {"a::b", 0, WDS_OK, 2,
     (const char *const[]){"a", "b"},
     NULL},
    {"a::::b", 0, WDS_OK, 2,
     (const char *const[]){"a", "b"},
     NULL},
    {"::a::", 0, WDS_OK, 1,
     (const char *const[]){"a"},
     NULL},
    {"a:::b", 0, WDS_OK, 2,
     (const char *const[]){"a", ":b"},
     NULL},
    {":a:", 0, WDS_OK, 1,
     (const char *const[]){":a:"},
     NULL},
    {"", 0, WDS_OK, 0, NULL, NULL},
    {"::", 0, WDS_OK, 0, NULL, NULL},
    {"{a,b}::{1..2}", 0, WDS_OK, 4,
     (const char *const[]){"a", "b", "1", "2"},
     NULL},
    {"${LOOP}", 0, WDS_OK, 1,
     (const char *const[]){"${LOOP}"},
     NULL},
    {"${A}", 0, WDS_OK, 2,
     (const char *const[]){"x1", "x2"},
     NULL},
    {"p/${PAIR}", 0, WDS_OK, 1,
     (const char *const[]){"p/a::b"},
     NULL},
    {"${}", 0, WDS_OK, 1,
     (const char *const[]){"${}"},
     NULL},
    {"$", 0, WDS_OK, 1,
     (const char *const[]){"$"},
     NULL},
    {"${A-B}", 0, WDS_OK, 1,
     (const char *const[]){"${A-B}"},
     NULL},
    {"$${A}", 0, WDS_OK, 2,
     (const char *const[]){"$x1", "$x2"},
     NULL},
    {"${${A}}", 0, WDS_OK, 2,
     (const char *const[]){"${x1}", "${x2}"},
     NULL},
    {"x${EMPTY}y", 0, WDS_OK, 1,
     (const char *const[]){"xy"},
     NULL},
    {"${ESC}", 0, WDS_OK, 1,
     (const char *const[]){"{q,r}"},
     NULL},
    {"${NOPE}", 0, WDS_ERR_SPEC, 0, NULL,
     "missing environment variable WDS_NOPE"},
    {"ok::${NOPE}", 0, WDS_ERR_SPEC, 0, NULL, "WDS_NOPE"},
    {"{a::b}", 0, WDS_ERR_SPEC, 0, NULL,
     "unbalanced brace at position 0 in \"{a\""},
    {"a-{0..3.tar::b", 0, WDS_ERR_SPEC, 0, NULL,
     "unbalanced brace at position 2 in \"a-{0..3.tar"
     "\""},
};
/* END GENERATED BRACE CASES */
/* clang-format on */

/* Printable form of a pattern for failure reports. */
static const char *shown(const char *s) {
  static char buf[120];
  size_t n = 0;
  for (; *s && n + 5 < sizeof buf; s++) {
    unsigned char c = (unsigned char)*s;
    if (c >= 0x20 && c < 0x7f)
      buf[n++] = (char)c;
    else
      n += (size_t)snprintf(buf + n, sizeof buf - n, "\\x%02x", c);
  }
  buf[n] = '\0';
  return buf;
}

/* Runs one case through fn; reports every difference, returns 0 if none. */
static int check_case(int (*fn)(const char *, size_t, wds_url_list *),
                      const char *what, size_t i, const brace_case *c) {
  wds_url_list list = {0};
  char err[1024], before[1024];
  int bad = 0;
  snprintf(before, sizeof before, "%s", wds_last_error());
  int rc = fn(c->pattern, c->max_urls, &list);
  snprintf(err, sizeof err, "%s", wds_last_error());
  if (rc != c->status) {
    TEST_FAIL_("%s[%zu] \"%s\": status %s, want %s (%s)", what, i,
               shown(c->pattern), wds_status_name(rc),
               wds_status_name(c->status), err);
    bad = 1;
  } else if (rc != WDS_OK) {
    if (!strstr(err, c->msg)) {
      TEST_FAIL_("%s[%zu] \"%s\": message \"%s\" lacks \"%s\"", what, i,
                 shown(c->pattern), err, c->msg);
      bad = 1;
    }
    if (list.count != 0 || list.urls != NULL) {
      TEST_FAIL_("%s[%zu]: list not empty after failure", what, i);
      bad = 1;
    }
  } else if (list.count != c->count) {
    TEST_FAIL_("%s[%zu] \"%s\": %zu URLs, want %zu", what, i, shown(c->pattern),
               list.count, c->count);
    bad = 1;
  } else {
    if (strcmp(err, before) != 0) {
      TEST_FAIL_("%s[%zu]: a success changed the last error", what, i);
      bad = 1;
    }
    for (size_t j = 0; j < c->count; j++) {
      if (strcmp(list.urls[j], c->urls[j]) != 0) {
        TEST_FAIL_("%s[%zu] \"%s\": URL %zu is \"%s\", want", what, i,
                   shown(c->pattern), j, shown(list.urls[j]));
        printf("    \"%s\"\n", shown(c->urls[j]));
        bad = 1;
        break;
      }
    }
  }
  wds_url_list_free(&list);
  return bad;
}

TEST(brace_table) {
  size_t n = sizeof brace_cases / sizeof brace_cases[0];
  ASSERT_TRUE(n >= 100);
  for (size_t i = 0; i < n; i++)
    check_case(wds_brace_expand, "brace_cases", i, &brace_cases[i]);
}

/* A pattern without "::", '@' or "${" is a spec of one part. */
TEST(brace_table_as_specs) {
  size_t n = sizeof brace_cases / sizeof brace_cases[0];
  for (size_t i = 0; i < n; i++) {
    const brace_case *c = &brace_cases[i];
    if (c->pattern[0] == '\0' || c->pattern[0] == '@' ||
        strstr(c->pattern, "::") || strstr(c->pattern, "${"))
      continue;
    check_case(wds_spec_expand, "brace_cases as spec", i, c);
  }
}

TEST(spec_table) {
  for (size_t i = 0; i < sizeof spec_env / sizeof spec_env[0]; i++)
    ASSERT_EQ_INT(setenv(spec_env[i][0], spec_env[i][1], 1), 0);
  for (size_t i = 0; i < sizeof spec_unset / sizeof spec_unset[0]; i++)
    ASSERT_EQ_INT(unsetenv(spec_unset[i]), 0);
  for (size_t i = 0; i < sizeof spec_cases / sizeof spec_cases[0]; i++)
    check_case(wds_spec_expand, "spec_cases", i, &spec_cases[i]);
}

/* WDS_DBL="${DBL}${DBL}" doubles for 10 passes, then is literal text. */
TEST(env_ten_passes) {
  wds_url_list list = {0};
  ASSERT_EQ_INT(setenv("WDS_DBL", "${DBL}${DBL}", 1), 0);
  ASSERT_EQ_INT(wds_spec_expand("${DBL}", 0, &list), WDS_OK);
  ASSERT_EQ_INT(list.count, 1);
  ASSERT_EQ_INT(strlen(list.urls[0]), 6 * 1024);
  wds_url_list_free(&list);
  /* Growing past 1 MiB is refused (Python would build gigabytes). */
  ASSERT_EQ_INT(
      setenv("WDS_OCT", "${OCT}${OCT}${OCT}${OCT}${OCT}${OCT}${OCT}", 1), 0);
  ASSERT_EQ_INT(wds_spec_expand("${OCT}", 0, &list), WDS_ERR_LIMIT);
  ASSERT_CONTAINS(wds_last_error(), "longer than 1048576 bytes");
  ASSERT_TRUE(list.urls == NULL && list.count == 0);
}

/* Python 3.11's int() refuses more than 4300 digits (ValueError). */
TEST(range_digit_limit) {
  enum { N = 4302 };
  char *p = malloc(N + 16);
  wds_url_list list = {0};
  ASSERT_TRUE(p != NULL);
  p[0] = '{';
  memset(p + 1, '0', 4300);
  strcpy(p + 4301, "..1}");
  ASSERT_EQ_INT(wds_brace_expand(p, 0, &list), WDS_OK);
  ASSERT_EQ_INT(list.count, 2);
  ASSERT_EQ_INT(strlen(list.urls[0]), 4300);
  ASSERT_EQ_INT(strspn(list.urls[0], "0"), 4300);
  ASSERT_EQ_INT(strspn(list.urls[1], "0"), 4299);
  ASSERT_STREQ(list.urls[1] + 4299, "1");
  wds_url_list_free(&list);
  p[0] = '{';
  memset(p + 1, '0', 4301);
  strcpy(p + 4302, "..1}");
  ASSERT_EQ_INT(wds_brace_expand(p, 0, &list), WDS_ERR_SPEC);
  ASSERT_CONTAINS(wds_last_error(), "more than 4300 digits at position 1");
  /* A negative sign is not a digit. */
  p[0] = '{';
  p[1] = '-';
  memset(p + 2, '7', 4300);
  strcpy(p + 4302, "..-1..9}");
  ASSERT_EQ_INT(wds_brace_expand(p, 0, &list), WDS_ERR_LIMIT);
  ASSERT_CONTAINS(wds_last_error(), "at least 18446744073709551615 URLs");
  free(p);
}

TEST(big_expansions) {
  wds_url_list list = {0};
  ASSERT_EQ_INT(wds_brace_expand("{0..999}/{000..999}", 0, &list), WDS_OK);
  ASSERT_EQ_INT(list.count, 1000000);
  ASSERT_STREQ(list.urls[0], "0/000");
  ASSERT_STREQ(list.urls[123456], "123/456");
  ASSERT_STREQ(list.urls[999999], "999/999");
  wds_url_list_free(&list);
  ASSERT_EQ_INT(wds_brace_expand("{999999..-999999..3}", 0, &list), WDS_OK);
  ASSERT_EQ_INT(list.count, 666667);
  ASSERT_STREQ(list.urls[333333], "0");
  ASSERT_STREQ(list.urls[333334], "-3");
  ASSERT_STREQ(list.urls[666666], "-999999");
  wds_url_list_free(&list);
  /* exactly the limit */
  ASSERT_EQ_INT(wds_brace_expand("{1..1000}", 1000, &list), WDS_OK);
  ASSERT_EQ_INT(list.count, 1000);
  wds_url_list_free(&list);
  wds_url_list_free(&list); /* freeing twice is harmless */
  wds_url_list_free(NULL);
}

/* Hostile input must fail fast, with bounded recursion and no allocation
 * proportional to the would-be expansion. */
TEST(hostile_patterns) {
  enum { N = 200000 };
  char *p = malloc(N * 5 + 1);
  wds_url_list list = {0};
  clock_t t0 = clock();
  ASSERT_TRUE(p != NULL);
  memset(p, '{', N);
  p[N] = '\0';
  ASSERT_EQ_INT(wds_brace_expand(p, 0, &list), WDS_ERR_SPEC);
  ASSERT_CONTAINS(wds_last_error(), "unbalanced brace at position 0");
  ASSERT_CONTAINS(wds_last_error(), "...\"");
  memset(p + N, '}', N);
  p[2 * N] = '\0';
  ASSERT_EQ_INT(wds_brace_expand(p, 0, &list), WDS_ERR_SPEC);
  ASSERT_CONTAINS(wds_last_error(), "nested more than 64 deep at position 64");
  memset(p, '}', N);
  p[N] = '\0';
  ASSERT_EQ_INT(wds_brace_expand(p, 0, &list), WDS_ERR_SPEC);
  ASSERT_CONTAINS(wds_last_error(), "unbalanced brace at position 0");
  for (size_t i = 0; i < N; i++)
    memcpy(p + 5 * i, "{a,b}", 5);
  p[5 * N] = '\0';
  ASSERT_EQ_INT(wds_brace_expand(p, 0, &list), WDS_ERR_LIMIT);
  ASSERT_CONTAINS(wds_last_error(),
                  "would make at least 18446744073709551615 URLs");
  for (size_t i = 0; i < N; i++)
    memcpy(p + 5 * i, "{a}\\z", 5);
  ASSERT_EQ_INT(wds_brace_expand(p, 0, &list), WDS_OK);
  ASSERT_EQ_INT(list.count, 1);
  ASSERT_EQ_INT(strlen(list.urls[0]), 4 * N);
  wds_url_list_free(&list);
  ASSERT_TRUE(list.urls == NULL && list.count == 0);
  ASSERT_TRUE((double)(clock() - t0) / CLOCKS_PER_SEC < 10.0);
  free(p);
}

TEST(limit_across_parts) {
  wds_url_list list = {0};
  ASSERT_EQ_INT(wds_spec_expand("{0..9}::{0..9}", 20, &list), WDS_OK);
  ASSERT_EQ_INT(list.count, 20);
  wds_url_list_free(&list);
  ASSERT_EQ_INT(wds_spec_expand("{0..9}::{0..9}", 19, &list), WDS_ERR_LIMIT);
  ASSERT_CONTAINS(wds_last_error(),
                  "\"{0..9}\" would make 10 URLs after 10 others, over "
                  "the limit of 19");
  ASSERT_TRUE(list.urls == NULL && list.count == 0);
}

TEST(byte_limit) {
  /* 10,000 URLs are within the URL limit, but 10,000 copies of a 512 KiB
   * literal are 5 GiB: refused before allocating. */
  size_t n = 512 * 1024;
  char *pat = malloc(n + 16);
  memset(pat, 'x', n);
  strcpy(pat + n, "{0000..9999}");
  wds_url_list list = {0};
  ASSERT_EQ_INT(wds_spec_expand(pat, 0, &list), WDS_ERR_LIMIT);
  ASSERT_CONTAINS(wds_last_error(), "would make 10000 URLs of up to 5242");
  ASSERT_CONTAINS(wds_last_error(),
                  "over the limit of 4294967296 bytes of URLs");
  ASSERT_TRUE(list.urls == NULL && list.count == 0);
  /* 100 of them (52 MB) are fine. */
  strcpy(pat + n, "{00..99}");
  ASSERT_EQ_INT(wds_spec_expand(pat, 0, &list), WDS_OK);
  ASSERT_EQ_INT(list.count, 100);
  wds_url_list_free(&list);
  free(pat);
}

TEST(api_contract) {
  wds_url_list list = {0};
  ASSERT_EQ_INT(wds_spec_expand(NULL, 0, &list), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "spec is NULL");
  ASSERT_EQ_INT(wds_brace_expand("a", 0, NULL), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "out is NULL");
  /* the message is the thread's, whole; a success leaves it */
  ASSERT_EQ_INT(wds_brace_expand("{", 0, &list), WDS_ERR_SPEC);
  ASSERT_CONTAINS(wds_last_error(), "unbalanced brace at position 0");
  ASSERT_TRUE(list.urls == NULL && list.count == 0);
  ASSERT_EQ_INT(wds_brace_expand("a", 0, &list), WDS_OK);
  ASSERT_EQ_INT(list.count, 1);
  ASSERT_CONTAINS(wds_last_error(), "unbalanced brace at position 0");
  wds_url_list_free(&list);
  /* the default limit is WDS_DEFAULT_MAX_URLS */
  ASSERT_EQ_INT(wds_brace_expand("{1..10000001}", 0, &list), WDS_ERR_LIMIT);
  ASSERT_CONTAINS(wds_last_error(),
                  "would make 10000001 URLs, over the limit of 10000000");
}

/* ---- @FILE lists ----------------------------------------------------- */

/* Writes text to a new temporary file; its path goes to path (64 bytes). */
static int write_temp(char *path, const char *text) {
  strcpy(path, "/tmp/wds_test_spec_XXXXXX");
  int fd = mkstemp(path);
  if (fd < 0)
    return -1;
  size_t n = strlen(text);
  int ok = write(fd, text, n) == (ssize_t)n;
  close(fd);
  return ok ? 0 : -1;
}

/* Expands spec (with flags) and compares with the URLs joined by spaces. */
static int expect_urls_flags(const char *spec, unsigned flags,
                             const char *joined) {
  wds_url_list list = {0};
  char got[2048];
  size_t n = 0;
  int rc = wds_spec_expand_flags(&spec, 1, 0, flags, &list);
  if (rc != WDS_OK) {
    TEST_FAIL_("\"%s\": %s (%s)", spec, wds_status_name(rc), wds_last_error());
    return 1;
  }
  got[0] = '\0';
  for (size_t i = 0; i < list.count; i++)
    n += (size_t)snprintf(got + n, sizeof got - n, "%s%s", i ? " " : "",
                          list.urls[i]);
  wds_url_list_free(&list);
  if (strcmp(got, joined) != 0) {
    TEST_FAIL_("\"%s\": got \"%s\", want \"%s\"", spec, got, joined);
    return 1;
  }
  return 0;
}

static int expect_urls(const char *spec, const char *joined) {
  return expect_urls_flags(spec, 0, joined);
}

/* Expands spec, expecting status and a message containing both parts. */
static int expect_error(const char *spec, int status, const char *part1,
                        const char *part2) {
  wds_url_list list = {0};
  int rc = wds_spec_expand(spec, 0, &list);
  if (rc != status || !strstr(wds_last_error(), part1) ||
      (part2 && !strstr(wds_last_error(), part2)) || list.urls || list.count) {
    TEST_FAIL_("\"%s\": %s \"%s\", want %s with \"%s\" and \"%s\"", spec,
               wds_status_name(rc), wds_last_error(), wds_status_name(status),
               part1, part2 ? part2 : "");
    wds_url_list_free(&list);
    return 1;
  }
  return 0;
}

/* A pipe: command read from a file is refused unless allowed, naming the
 * file, the line and the option; typed in the spec it runs. */
TEST(pipe_from_files_refused) {
  char inner[64], outer[64], spec[256];
  ASSERT_EQ_INT(
      write_temp(inner, "a.tar\n\n  pipe:curl -s http://h/{0,1}.tar\n"), 0);
  char text[256];
  snprintf(text, sizeof text, "x.tar\n@%s\n", inner);
  ASSERT_EQ_INT(write_temp(outer, text), 0);
  char want[320];
  snprintf(want, sizeof want,
           "%s line 3: \"pipe:curl -s http://h/0.tar\" is a pipe: command "
           "read from a file, which is not run unless allowed "
           "(--allow-pipe-from-files",
           inner);
  snprintf(spec, sizeof spec, "@%s", inner);
  expect_error(spec, WDS_ERR_SPEC, want, NULL);
  snprintf(spec, sizeof spec, "y.tar::@%s", outer); /* nested: the same */
  expect_error(spec, WDS_ERR_SPEC, want, NULL);
  expect_urls_flags(spec, WDS_SPEC_ALLOW_PIPE_FROM_FILES,
                    "y.tar x.tar a.tar pipe:curl -s http://h/0.tar "
                    "pipe:curl -s http://h/1.tar");
  /* typed in the spec, from ${} too: the user's own */
  expect_urls("pipe:cat a.tar::b.tar", "pipe:cat a.tar b.tar");
  ASSERT_EQ_INT(setenv("WDS_TESTPIPE", "pipe:cat", 1), 0);
  expect_urls("${TESTPIPE} c.tar", "pipe:cat c.tar");
  /* the old entry points refuse too */
  wds_url_list list = {0};
  const char *one = spec;
  ASSERT_EQ_INT(wds_spec_expand_list(&one, 1, 0, &list), WDS_ERR_SPEC);
  ASSERT_CONTAINS(wds_last_error(), "is a pipe: command read from a file");
  unlink(inner);
  unlink(outer);
}

TEST(file_lists) {
  char inner[64], outer[64], spec[256];
  ASSERT_EQ_INT(write_temp(inner, "n{1,2}\n# only a comment\n"), 0);
  char text[512];
  snprintf(text, sizeof text,
           "# shards of the test set\n"
           "\n"
           "   \t\n"
           "  data-{0..1}.tar  \n"
           "\t# an indented comment\n"
           "x::y\r\n"
           "@%s\n"
           "pipe:cat /d/a b.tar\n"
           "last-line-without-newline",
           inner);
  ASSERT_EQ_INT(write_temp(outer, text), 0);
  snprintf(spec, sizeof spec, "@%s", outer);
  expect_urls_flags(spec, WDS_SPEC_ALLOW_PIPE_FROM_FILES,
                    "data-0.tar data-1.tar x y n1 n2 pipe:cat /d/a b.tar "
                    "last-line-without-newline");
  /* (unless allowed, its pipe: line is refused: pipe_from_files_refused) */
  snprintf(spec, sizeof spec, "first::@%s::{a,b}::@%s", inner, inner);
  expect_urls(spec, "first n1 n2 a b n1 n2");
  /* ${} applies to the lines of a file too */
  ASSERT_EQ_INT(setenv("WDS_TESTDIR", "/t", 1), 0);
  char var[64];
  ASSERT_EQ_INT(write_temp(var, "${TESTDIR}/{a,b}\n"), 0);
  snprintf(spec, sizeof spec, "@%s", var);
  expect_urls(spec, "/t/a /t/b");
  /* an empty file gives no URLs */
  char empty[64];
  ASSERT_EQ_INT(write_temp(empty, ""), 0);
  snprintf(spec, sizeof spec, "@%s", empty);
  expect_urls(spec, "");
  unlink(inner);
  unlink(outer);
  unlink(var);
  unlink(empty);
}

TEST(file_errors) {
  char bad[64], self[64], spec[256], where[256];
  expect_error("@/nonexistent/wds-list.txt", WDS_ERR_OPEN,
               "cannot open @FILE \"/nonexistent/wds-list.txt\"",
               strerror(ENOENT));
  expect_error("a::@", WDS_ERR_SPEC, "missing file name after '@'", NULL);
  expect_error("@/tmp", WDS_ERR_OPEN, "\"/tmp\"", strerror(EISDIR));
  /* an error on a line names the file and the line */
  ASSERT_EQ_INT(write_temp(bad, "ok.tar\n\n# c\nx-{0..3.tar\n"), 0);
  snprintf(spec, sizeof spec, "@%s", bad);
  snprintf(where, sizeof where, "%s line 4: ", bad);
  expect_error(spec, WDS_ERR_SPEC, where,
               "unbalanced brace at position 2 in \"x-{0..3.tar\"");
  unlink(bad);
  ASSERT_EQ_INT(write_temp(bad, "a\n${WDS_TEST_UNSET_VAR}\n"), 0);
  ASSERT_EQ_INT(unsetenv("WDS_WDS_TEST_UNSET_VAR"), 0);
  snprintf(spec, sizeof spec, "@%s", bad);
  snprintf(where, sizeof where, "%s line 2: ", bad);
  expect_error(spec, WDS_ERR_SPEC, where,
               "missing environment variable WDS_WDS_TEST_UNSET_VAR");
  unlink(bad);
  /* a NUL byte cannot be part of a spec */
  strcpy(bad, "/tmp/wds_test_spec_XXXXXX");
  int fd = mkstemp(bad);
  ASSERT_TRUE(fd >= 0);
  ASSERT_EQ_INT(write(fd, "a\nb\0c\n", 6), 6);
  close(fd);
  snprintf(spec, sizeof spec, "@%s", bad);
  snprintf(where, sizeof where, "%s line 2: NUL byte", bad);
  expect_error(spec, WDS_ERR_SPEC, where, NULL);
  unlink(bad);
  /* a file that lists itself stops at WDS_SPEC_MAX_DEPTH */
  strcpy(self, "/tmp/wds_test_spec_XXXXXX");
  fd = mkstemp(self);
  ASSERT_TRUE(fd >= 0);
  close(fd);
  char text[128];
  snprintf(text, sizeof text, "a\n@%s\n", self);
  FILE *f = fopen(self, "w");
  ASSERT_TRUE(f != NULL);
  fputs(text, f);
  fclose(f);
  snprintf(spec, sizeof spec, "@%s", self);
  snprintf(where, sizeof where, "%s line 2: %s line 2: ", self, self);
  expect_error(spec, WDS_ERR_SPEC, where, "nested more than 8 deep");
  unlink(self);
}

/* Files nested exactly WDS_SPEC_MAX_DEPTH deep work; one more fails. */
TEST(file_nesting_depth) {
  char paths[WDS_SPEC_MAX_DEPTH + 1][64];
  char text[128], spec[128];
  ASSERT_EQ_INT(write_temp(paths[WDS_SPEC_MAX_DEPTH], "leaf\n"), 0);
  for (int i = WDS_SPEC_MAX_DEPTH - 1; i >= 0; i--) {
    snprintf(text, sizeof text, "l%d\n@%s\n", i, paths[i + 1]);
    ASSERT_EQ_INT(write_temp(paths[i], text), 0);
  }
  /* paths[1] .. paths[8]: eight files */
  snprintf(spec, sizeof spec, "@%s", paths[1]);
  expect_urls(spec, "l1 l2 l3 l4 l5 l6 l7 leaf");
  /* paths[0] .. paths[8]: nine files */
  snprintf(spec, sizeof spec, "@%s", paths[0]);
  expect_error(spec, WDS_ERR_SPEC, "nested more than 8 deep", paths[8]);
  for (int i = 0; i <= WDS_SPEC_MAX_DEPTH; i++)
    unlink(paths[i]);
}

TEST(file_limit) {
  char path[64], spec[128];
  wds_url_list list = {0};
  ASSERT_EQ_INT(write_temp(path, "{0..9}\n{0..9}\n{0..9}\n"), 0);
  snprintf(spec, sizeof spec, "@%s", path);
  ASSERT_EQ_INT(wds_spec_expand(spec, 30, &list), WDS_OK);
  ASSERT_EQ_INT(list.count, 30);
  wds_url_list_free(&list);
  ASSERT_EQ_INT(wds_spec_expand(spec, 25, &list), WDS_ERR_LIMIT);
  ASSERT_CONTAINS(wds_last_error(),
                  "line 3: \"{0..9}\" would make 10 URLs after 20 others, "
                  "over the limit of 25");
  ASSERT_TRUE(list.urls == NULL && list.count == 0);
  unlink(path);
}

int main(void) {
  RUN(brace_table);
  RUN(brace_table_as_specs);
  RUN(spec_table);
  RUN(env_ten_passes);
  RUN(range_digit_limit);
  RUN(big_expansions);
  RUN(hostile_patterns);
  RUN(limit_across_parts);
  RUN(byte_limit);
  RUN(api_contract);
  RUN(file_lists);
  RUN(pipe_from_files_refused);
  RUN(file_errors);
  RUN(file_nesting_depth);
  RUN(file_limit);
  return test_summary();
}
