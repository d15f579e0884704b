/* test_options.c — the loader's option table (wds/loader.h,
 * loader/options.c): every row settable by name and by flag, the bounds,
 * the enum names, the unit of a timeout, and bad values refused with a
 * message naming the option as it was named, leaving the config as it
 * was. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "test.h"
#include "wds/loader.h"

/* A config at its defaults, padding included (compared with memcmp). */
static wds_loader_config fresh(void) {
  static const wds_loader_config init = WDS_LOADER_CONFIG_INIT;
  wds_loader_config c;
  memcpy(&c, &init, sizeof c);
  return c;
}

/* The field of row r in c, as the table stores it (4 or 8 bytes). */
static int64_t field(const wds_loader_config *c, const wds_loader_option *r) {
  const char *p = (const char *)c + r->offset;
  if (r->size == sizeof(int32_t)) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
  }
  int64_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* A value every row takes, by name, and what the field holds then. */
static const char *good_value(const wds_loader_option *r, int64_t *want) {
  switch (r->type) {
  case WDS_OPTION_BOOL:
    *want = 1;
    return "1";
  case WDS_OPTION_INT:
  case WDS_OPTION_SIZE:
    *want = (int64_t)r->min + 1;
    return r->min == 0 ? "1" : r->min == 1 ? "2" : "3";
  case WDS_OPTION_TIMEOUT:
    *want = 1500;
    return "1500";
  case WDS_OPTION_ENUM:
    *want = 1;
    return r->names[1];
  case WDS_OPTION_STRING:
    *want = 0;
    return "some/where";
  case WDS_OPTION_FLOATS: { /* the field's first double: 0.25 */
    double first = 0.25;
    memcpy(want, &first, sizeof first);
    return r->count == 1 ? "0.25" : r->count == 2 ? "0.25,0.5" : "0.25,0.5,1";
  }
  }
  return NULL;
}

TEST(every_row_is_settable_by_name_and_by_flag) {
  size_t n = 0;
  for (const wds_loader_option *r; (r = wds_loader_option_at(n)); n++) {
    ASSERT_TRUE(r->name && r->flag && r->help && *r->help);
    ASSERT_TRUE(r->offset + r->size <= sizeof(wds_loader_config));
    ASSERT_TRUE(wds_loader_option_find(r->name) == r);
    char flag[64];
    snprintf(flag, sizeof flag, "--%s", r->flag);
    ASSERT_TRUE(wds_loader_option_find(flag) == r);
    ASSERT_TRUE(r->type == WDS_OPTION_BOOL ? r->cli_value && !r->value_name
                                           : r->value_name != NULL);
    int64_t want = 0;
    const char *v = good_value(r, &want);
    wds_loader_config c = fresh();
    if (wds_loader_config_set(&c, r->name, v) != WDS_OK) {
      TEST_FAIL_("%s=%s: %s", r->name, v, wds_last_error());
      return;
    }
    if (r->type == WDS_OPTION_STRING) {
      const char *s;
      memcpy(&s, (const char *)&c + r->offset, sizeof s);
      ASSERT_TRUE(s == v);
    } else if (field(&c, r) != want) {
      TEST_FAIL_("%s=%s stored %lld", r->name, v, (long long)field(&c, r));
      return;
    }
    if (r->type == WDS_OPTION_BOOL) { /* the flag: no value, its meaning */
      wds_loader_config d = fresh();
      ASSERT_EQ_INT(wds_loader_config_set(&d, flag, NULL), WDS_OK);
      ASSERT_TRUE(field(&d, r) == (strcmp(r->cli_value, "1") == 0));
      ASSERT_EQ_INT(wds_loader_config_set(&d, flag, "1"), WDS_ERR_INVALID);
      ASSERT_CONTAINS(wds_last_error(), "takes no value");
    } else if (r->type != WDS_OPTION_TIMEOUT) { /* flag's grammar: seconds */
      wds_loader_config d = fresh();
      ASSERT_EQ_INT(wds_loader_config_set(&d, flag, v), WDS_OK);
      ASSERT_TRUE(
          memcmp((char *)&c + r->offset, (char *)&d + r->offset, r->size) == 0);
    }
  }
  ASSERT_TRUE(n >= 30);
  ASSERT_TRUE(wds_loader_option_at(n) == NULL);
  ASSERT_TRUE(wds_loader_option_find("spec") == NULL);
  ASSERT_TRUE(wds_loader_option_find("--decode") == NULL);
}

TEST(names_and_flags_are_unique) {
  for (size_t i = 0; wds_loader_option_at(i); i++)
    for (size_t j = i + 1; wds_loader_option_at(j); j++) {
      const wds_loader_option *a = wds_loader_option_at(i),
                              *b = wds_loader_option_at(j);
      ASSERT_TRUE(strcmp(a->name, b->name) != 0);
      ASSERT_TRUE(strcmp(a->flag, b->flag) != 0);
      ASSERT_TRUE(a->offset != b->offset);
    }
}

/* value refused for name, with a message holding each of want (NULL-
 * terminated), and the config untouched. */
static int refused(const char *name, const char *value,
                   const char *const *want) {
  wds_loader_config c = fresh(), before = fresh();
  if (wds_loader_config_set(&c, name, value) != WDS_ERR_INVALID) {
    printf("  %s=\"%s\" was taken\n", name, value);
    return 0;
  }
  if (memcmp(&c, &before, sizeof c) != 0) {
    printf("  %s=\"%s\" changed the config\n", name, value);
    return 0;
  }
  for (; *want; want++)
    if (!strstr(wds_last_error(), *want)) {
      printf("  %s=\"%s\": \"%s\" lacks \"%s\"\n", name, value,
             wds_last_error(), *want);
      return 0;
    }
  return 1;
}

#define REFUSED(name, value, ...)                                              \
  ASSERT_TRUE(refused(name, value, (const char *const[]){__VA_ARGS__, NULL}))

TEST(bounds_and_messages) {
  REFUSED("--workers", "0",
          "--workers needs a whole number in 1..256, not "
          "\"0\"");
  REFUSED("workers", "257", "workers needs a whole number in 1..256");
  REFUSED("--batch-size", "0",
          "--batch-size needs a whole number in 1..16777216, not \"0\"");
  REFUSED("batch_size", "16777217", "batch_size", "1..16777216");
  REFUSED("--prefetch", "1", "--prefetch", "2..1024");
  REFUSED("--samples-per-epoch", "0",
          "--samples-per-epoch needs a whole number of at least 1");
  /* digits only: no sign, blank, fraction or suffix */
  REFUSED("seed", "-1", "seed needs", "\"-1\"");
  REFUSED("seed", "+1", "seed");
  REFUSED("seed", " 1", "seed");
  REFUSED("seed", "1.0", "seed");
  REFUSED("seed", "", "seed");
  REFUSED("seed", "18446744073709551616", "seed");
  REFUSED("--retries", "1001",
          "--retries needs a count from 0 to 1000, not \"1001\"");
  REFUSED("--max-window", "12Q", "--max-window needs a size in bytes", "12Q");
  REFUSED("--max-window", "0", "--max-window");
  REFUSED("--cache-size", "-1", "--cache-size needs a size in bytes",
          "0 = no limit");
  REFUSED("--image-memory-limit", "0", "--image-memory-limit needs a size");
  REFUSED("--shuffle-bytes", "1X", "--shuffle-bytes needs a size in bytes");
  REFUSED("--read-timeout", "-1",
          "--read-timeout needs seconds (0 = wait forever, at most 24 "
          "days), not \"-1\"");
  REFUSED("--read-timeout", "2073601", "--read-timeout");
  REFUSED("--read-timeout", "nan", "--read-timeout");
  /* seconds in decimal, without a sign: strtod took
   * hex, signs, exponents, infinity and blanks */
  REFUSED("--read-timeout", "0x10", "--read-timeout", "\"0x10\"");
  REFUSED("--read-timeout", "-0", "--read-timeout", "\"-0\"");
  REFUSED("--read-timeout", "+5", "--read-timeout");
  REFUSED("--read-timeout", "1e3", "--read-timeout");
  REFUSED("--read-timeout", " 5", "--read-timeout");
  REFUSED("--read-timeout", "5 ", "--read-timeout");
  REFUSED("--read-timeout", "inf", "--read-timeout");
  REFUSED("--read-timeout", ".", "--read-timeout");
  REFUSED("--read-timeout", "", "--read-timeout");
  REFUSED("--read-timeout", "1.2.3", "--read-timeout");
  REFUSED("read_timeout_ms", "0x10", "read_timeout_ms");
  REFUSED("read_timeout_ms", "-0", "read_timeout_ms");
  REFUSED("read_timeout_ms", "1.5", "read_timeout_ms needs milliseconds");
  REFUSED("read_timeout_ms", "-5", "read_timeout_ms");
  REFUSED("drop_last", "yes", "drop_last needs 1 or 0");
  REFUSED("--index", "", "--index needs a file name");
  REFUSED("cache_dir", "", "cache_dir needs a directory");
  REFUSED("nonsense", "1", "unknown loader option \"nonsense\"");
  REFUSED("--decode", "cls", "unknown loader option \"--decode\"");
}

TEST(enum_names) {
  REFUSED("--crop", "middle",
          "--crop must be center or random, not "
          "\"middle\"");
  REFUSED("mode", "fancy", "mode must be plain, exact or resampled");
  REFUSED("--last-batch", "fill", "keep, drop or pad");
  REFUSED("on_error", "Skip", "stop or skip"); /* case matters */
  REFUSED("defer_reads", "sometimes", "defer_reads must be auto, on or off");
  REFUSED("jpeg_decode", "tpu", "cpu or gpu");
  wds_loader_config c = fresh();
  ASSERT_EQ_INT(wds_loader_config_set(&c, "mode", "resampled"), WDS_OK);
  ASSERT_EQ_INT(c.mode, WDS_MODE_RESAMPLED);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "--last-batch", "pad"), WDS_OK);
  ASSERT_EQ_INT(c.last_batch, WDS_LAST_PAD);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "crop", "random"), WDS_OK);
  ASSERT_EQ_INT(c.crop, WDS_CROP_RANDOM);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "on_error", "skip"), WDS_OK);
  ASSERT_EQ_INT(c.on_error, WDS_ON_ERROR_SKIP);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "defer_reads", "off"), WDS_OK);
  ASSERT_EQ_INT(c.defer_reads, WDS_DEFER_OFF);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "jpeg_decode", "gpu"), WDS_OK);
  ASSERT_EQ_INT(c.jpeg_decode, WDS_JPEG_DECODE_GPU);
}

TEST(units_and_special_values) {
  wds_loader_config c = fresh();
  /* The CLI's seconds and Python's milliseconds; 0 is "wait forever". */
  ASSERT_EQ_INT(wds_loader_config_set(&c, "--read-timeout", "2.5"), WDS_OK);
  ASSERT_EQ_INT(c.read_timeout_ms, 2500);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "--read-timeout", "0.0001"), WDS_OK);
  ASSERT_EQ_INT(c.read_timeout_ms, 1);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "--read-timeout", ".5"), WDS_OK);
  ASSERT_EQ_INT(c.read_timeout_ms, 500);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "--read-timeout", "7."), WDS_OK);
  ASSERT_EQ_INT(c.read_timeout_ms, 7000);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "--read-timeout", "0"), WDS_OK);
  ASSERT_EQ_INT(c.read_timeout_ms, -1);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "read_timeout_ms", "750"), WDS_OK);
  ASSERT_EQ_INT(c.read_timeout_ms, 750);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "read_timeout_ms", "0"), WDS_OK);
  ASSERT_EQ_INT(c.read_timeout_ms, -1);
  /* retries 0 is none (the field's 0 is the default, 5) */
  ASSERT_EQ_INT(wds_loader_config_set(&c, "retries", "0"), WDS_OK);
  ASSERT_EQ_INT(c.retries, -1);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "--retries", "1000"), WDS_OK);
  ASSERT_EQ_INT(c.retries, 1000);
  /* sizes with suffixes */
  ASSERT_EQ_INT(wds_loader_config_set(&c, "--max-window", "2G"), WDS_OK);
  ASSERT_TRUE(c.max_window_bytes == (uint64_t)2 << 30);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "cache_size", "0"), WDS_OK);
  ASSERT_TRUE(c.cache_size == 0);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "cache_size", "3MB"), WDS_OK);
  ASSERT_TRUE(c.cache_size == 3000000);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "seed", "18446744073709551615"),
                WDS_OK);
  ASSERT_TRUE(c.seed == UINT64_MAX);
  /* --no-shard-shuffle sets shard_shuffle to 0 */
  const wds_loader_option *r = wds_loader_option_find("--no-shard-shuffle");
  ASSERT_TRUE(r && strcmp(r->name, "shard_shuffle") == 0);
  ASSERT_EQ_INT(c.shard_shuffle, 1);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "--no-shard-shuffle", NULL), WDS_OK);
  ASSERT_EQ_INT(c.shard_shuffle, 0);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "shard_shuffle", "true"), WDS_OK);
  ASSERT_EQ_INT(c.shard_shuffle, 1);
  /* the names that are not the field's */
  ASSERT_EQ_INT(wds_loader_config_set(&c, "prefetch", "8"), WDS_OK);
  ASSERT_EQ_INT(c.prefetch_batches, 8);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "index", "i.json"), WDS_OK);
  ASSERT_STREQ(c.index_path, "i.json");
  ASSERT_EQ_INT(wds_loader_config_set(&c, "--world", "3"), WDS_OK);
  ASSERT_EQ_INT(c.world_size, 3);
  ASSERT_EQ_INT(wds_loader_config_set(NULL, "seed", "1"), WDS_ERR_INVALID);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "seed", NULL), WDS_ERR_INVALID);
  ASSERT_EQ_INT(wds_loader_config_set(&c, NULL, "1"), WDS_ERR_INVALID);
}

/* The CLI indents help lines by 25 columns: they fit in 80. */
TEST(help_lines_fit) {
  for (size_t i = 0; wds_loader_option_at(i); i++) {
    const char *p = wds_loader_option_at(i)->help;
    while (*p) {
      const char *nl = strchr(p, '\n');
      size_t len = nl ? (size_t)(nl - p) : strlen(p);
      if (len > 55) {
        TEST_FAIL_("%s: help line of %zu columns: %.*s",
                   wds_loader_option_at(i)->name, len, (int)len, p);
        return;
      }
      p += len + (nl != NULL);
    }
  }
}

/* cfg breaks one rule: check names the options as the naming says. */
static int breaks(const wds_loader_config *cfg, const char *by_keyword,
                  const char *by_flag) {
  int ok = 1;
  if (wds_loader_config_check(cfg, WDS_OPTION_NAMES_KEYWORD) !=
          WDS_ERR_INVALID ||
      !strstr(wds_last_error(), by_keyword)) {
    printf("  keyword naming: want \"%s\", got \"%s\"\n", by_keyword,
           wds_last_error());
    ok = 0;
  }
  if (wds_loader_config_check(cfg, WDS_OPTION_NAMES_FLAG) != WDS_ERR_INVALID ||
      !strstr(wds_last_error(), by_flag)) {
    printf("  flag naming: want \"%s\", got \"%s\"\n", by_flag,
           wds_last_error());
    ok = 0;
  }
  return ok;
}

/* The rules between options: one check, each rule naming its options as
 * the caller names them (the CLI's flags or the Python keywords). */
TEST(rules_between_options) {
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  ASSERT_EQ_INT(wds_loader_config_check(&c, WDS_OPTION_NAMES_FLAG), WDS_OK);
  c.mode = WDS_MODE_RESAMPLED;
  ASSERT_TRUE(breaks(&c, "mode=\"resampled\" needs samples_per_epoch",
                     "--mode resampled needs --samples-per-epoch"));
  c.samples_per_epoch = 100;
  ASSERT_EQ_INT(wds_loader_config_check(&c, WDS_OPTION_NAMES_FLAG), WDS_OK);
  /* The options a mode ignores: set to other than the default, an error
   * naming the option and the mode. */
  c.shard_shuffle = 0;
  ASSERT_TRUE(breaks(&c,
                     "shard_shuffle=False is not used in mode=\"resampled\" "
                     "(shards are drawn with replacement",
                     "--no-shard-shuffle is not used in --mode resampled"));
  c.shard_shuffle = 1;
  c.mode = WDS_MODE_EXACT;
  ASSERT_TRUE(breaks(&c, "samples_per_epoch is not used in mode=\"exact\"",
                     "--samples-per-epoch is not used in --mode exact"));
  c.samples_per_epoch = 0;
  c.index_path = "ix.json";
  wds_source_config src[1] = {{.spec = "a.tar"}};
  c.sources = src;
  c.source_count = 1;
  ASSERT_TRUE(breaks(&c, "index with sources: give each source its own index",
                     "--index with --source: give each source its own index "
                     "(--source SPEC:index=FILE)"));
  c.sources = NULL;
  c.source_count = 0;
  ASSERT_EQ_INT(wds_loader_config_check(&c, WDS_OPTION_NAMES_FLAG), WDS_OK);
  c.mode = WDS_MODE_PLAIN;
  ASSERT_TRUE(breaks(&c, "index is only used in mode=\"exact\"",
                     "--index is only used in --mode exact"));
  c.index_path = NULL;
  size_t sizes[3] = {4, 2, 2};
  c.rank_batch_sizes = sizes;
  c.rank_batch_size_count = 3;
  ASSERT_TRUE(breaks(&c, "rank_batch_sizes needs mode=\"exact\" or resampled",
                     "--rank-batch-sizes needs --mode exact or resampled"));
  c.mode = WDS_MODE_EXACT;
  c.world_size = 2;
  ASSERT_TRUE(breaks(&c, "rank_batch_sizes gives 3 ranks, but world_size is 2",
                     "--rank-batch-sizes gives 3 ranks, but --world is 2"));
  c.rank_batch_sizes = NULL;
  c.rank_batch_size_count = 0;
  c.rank = 2;
  ASSERT_TRUE(breaks(&c, "rank 2 is not below world_size 2",
                     "--rank 2 is not below --world 2"));
  c.rank = 1;
  c.shuffle_buffer = 4;
  c.shuffle_initial = 9;
  ASSERT_TRUE(breaks(&c, "shuffle_initial 9 is larger than shuffle_buffer 4",
                     "--shuffle-initial 9 is larger than --shuffle-buffer 4"));
  c.shuffle_initial = 4;
  ASSERT_EQ_INT(wds_loader_config_check(&c, WDS_OPTION_NAMES_KEYWORD), WDS_OK);
  /* Every mode but resampled takes the spec's shard order; drop_last and
   * any last_batch, given or not (WDS_LAST_AUTO), act in every mode. */
  c.shard_shuffle = 0;
  for (int mode = WDS_MODE_PLAIN; mode <= WDS_MODE_RESAMPLED; mode++) {
    c.mode = (wds_mode)mode;
    c.shard_shuffle = mode != WDS_MODE_RESAMPLED ? 0 : 1;
    c.samples_per_epoch = mode == WDS_MODE_RESAMPLED ? 10 : 0;
    for (int last = WDS_LAST_KEEP; last <= WDS_LAST_AUTO; last++)
      for (int drop = 0; drop < 2; drop++) {
        c.last_batch = (wds_last_batch)last;
        c.drop_last = drop;
        ASSERT_EQ_INT(wds_loader_config_check(&c, WDS_OPTION_NAMES_FLAG),
                      WDS_OK);
      }
  }
}

/* last_batch's default is "not given" (WDS_LAST_AUTO), which the open
 * resolves from drop_last; set by name it is the policy named. */
TEST(last_batch_unset_by_default) {
  wds_loader_config c = WDS_LOADER_CONFIG_INIT;
  ASSERT_EQ_INT(c.last_batch, WDS_LAST_AUTO);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "--drop-last", NULL), WDS_OK);
  ASSERT_EQ_INT(c.last_batch, WDS_LAST_AUTO); /* the open decides */
  ASSERT_EQ_INT(wds_loader_config_set(&c, "--last-batch", "keep"), WDS_OK);
  ASSERT_EQ_INT(c.last_batch, WDS_LAST_KEEP);
  ASSERT_EQ_INT(wds_loader_config_set(&c, "last_batch", "auto"),
                WDS_ERR_INVALID); /* not a value to give */
  ASSERT_CONTAINS(wds_last_error(), "keep, drop or pad");
}

/* wds_env_topology: the rank the loader takes from the environment, for
 * front ends that split further (wds.Dataset), by the rule wds-train reads:
 * a partial set is an error naming the variable, never rank 0 of 1. */
TEST(env_topology_is_the_loaders_rule) {
  const char *vars[] = {"RANK",
                        "WORLD_SIZE",
                        "LOCAL_RANK",
                        "LOCAL_WORLD_SIZE",
                        "SLURM_PROCID",
                        "SLURM_NTASKS",
                        "SLURM_NODEID",
                        "OMPI_COMM_WORLD_RANK",
                        "OMPI_COMM_WORLD_SIZE",
                        "PMI_RANK",
                        "PMI_SIZE",
                        "PMIX_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
    unsetenv(vars[i]);
  int rank = -5, world = -5;
  ASSERT_EQ_INT(wds_env_topology(&rank, &world), WDS_OK);
  ASSERT_EQ_INT(rank, 0);
  ASSERT_EQ_INT(world, 1);
  setenv("PMI_RANK", "1", 1);
  setenv("PMI_SIZE", "2", 1);
  ASSERT_EQ_INT(wds_env_topology(&rank, &world), WDS_OK);
  ASSERT_EQ_INT(rank, 1);
  ASSERT_EQ_INT(world, 2);
  unsetenv("PMI_SIZE");
  ASSERT_EQ_INT(wds_env_topology(&rank, &world), WDS_ERR_INVALID);
  ASSERT_CONTAINS(wds_last_error(), "PMI_SIZE");
  ASSERT_EQ_INT(rank, 0);
  ASSERT_EQ_INT(world, 1);
  unsetenv("PMI_RANK");
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "3", 1);
  ASSERT_EQ_INT(wds_env_topology(&rank, NULL), WDS_OK);
  ASSERT_EQ_INT(rank, 2);
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
}

int main(void) {
  RUN(every_row_is_settable_by_name_and_by_flag);
  RUN(names_and_flags_are_unique);
  RUN(bounds_and_messages);
  RUN(enum_names);
  RUN(units_and_special_values);
  RUN(help_lines_fit);
  RUN(rules_between_options);
  RUN(last_batch_unset_by_default);
  RUN(env_topology_is_the_loaders_rule);
  return test_summary();
}
