/* main.c — the wds-train command line: parses options into tr_options
 * (the loader's through tools/loader_opts.c and wds_loader_config_check,
 * its own in the option table's wording), picks the backend (--device),
 * runs tr_run(). Errors print "wds-train: ..." and exit 1; usage errors
 * exit 2; stdout is checked as the tools check it (tools/util.c). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/size.h"
#include "base/topology.h"
#include "shards/netrc.h"
#include "tools/loader_opts.h"
#include "tools/opts.h"
#include "tools/signals.h"
#include "tools/util.h"
#include "trainer/launch.h"
#ifdef WDS_TRAINER_MPI
#include "trainer/pg_mpi.h"
#endif
#include "trainer/train.h"
#include "wds/version.h"

static const char usage_text[] =
    "usage: wds-train --train SPEC | --source SRC... [--eval SPEC] [options]\n"
    "\n"
    "Trains an MLP classifier on images (the jpg, jpeg or png field) and\n"
    "labels (the cls field) of WebDataset shards, data-parallel.\n"
    "\n"
    "Data:\n"
    "  --train SPEC           training shards (wds spec); or --source (below)\n"
    "                         once per source of a mix\n"
    "  --eval SPEC            held-out shards: loss and accuracy after each\n"
    "                         epoch and at the end\n"
    "  --image-size N         images resized/cropped to N x N (default 32)\n"
    "  --channels 1|3         gray or RGB (default 3)\n"
    "  --mode exact|resampled epoch mode (default exact)\n"
    "  --samples-per-epoch N  resampled mode: samples per node and epoch\n"
    "  --last-batch keep|drop|pad  partial last batch (default keep)\n"
    "  --shuffle-buffer N     samples per worker (default 1000; 0 = none)\n"
    "Model and optimizer:\n"
    "  --hidden LIST          hidden sizes, e.g. 256,128 (default); '' none\n"
    "  --classes N            output classes (default 10)\n"
    "  --lr X                 peak learning rate (default 0.05)\n"
    "  --momentum X           (default 0.9)\n"
    "  --weight-decay X       (default 5e-4)\n"
    "  --warmup-steps N       linear warm-up, then cosine decay (default 0)\n"
    "  --seed S               weights and data order (default 0)\n";

/* In two: C99's limit on a string literal's length. */
static const char usage_text_2[] =
    "Run:\n"
    "  --batch-size B         rows per rank and step (default 32); a loader\n"
    "                         batch is ranks x B rows, rank r gets rows\n"
    "                         [r*B, (r+1)*B)\n"
    "  --rank-batch-sizes B0,B1,...  each rank's rows per step instead (GPUs\n"
    "                         of different sizes), one per rank of the job\n"
    "                         (CPU: sets --ranks): the epoch is split in\n"
    "                         proportion and every rank takes the same\n"
    "                         steps; the gradient is the mean over the\n"
    "                         global batch (sum of the sizes), so --lr and\n"
    "                         its schedule are per global batch, as with\n"
    "                         equal sizes of the same sum\n"
    "  --epochs E             (default 1)   --steps S   (overrides --epochs)\n"
    "  --stop-after K         stop after step K (checkpointed), as if\n"
    "                         interrupted; resume with the same options\n"
    "  --device cpu|cuda|auto (default auto: cuda when built with it and a\n"
    "                         GPU is present, else cpu)\n"
    "  --ranks N              CPU: rank threads (default 1; not used when\n"
    "                         auto picks cuda)\n"
    "  --gpus N               CUDA: GPUs used (default all)\n"
    "  --precision auto|tf32|fp32  CUDA matrix products: TF32 tensor cores\n"
    "                         (auto: where the GPU has them) or full FP32\n"
    "Several processes: mpirun -np N wds-train ... or srun --mpi=pmix\n"
    "  wds-train ... (a wds-train built with MPI): one process per GPU, or\n"
    "  per --ranks CPU rank threads; rank, size, local rank and node from\n"
    "  MPI. Or torchrun --no-python wds-train (GPUs only): NCCL's processes\n"
    "  meet at NCCL_COMM_ID (default MASTER_ADDR:MASTER_PORT+1).\n"
    "  --collective-timeout SECONDS  a collective or copy that makes\n"
    "                         no progress this long (a peer process died or\n"
    "                         hangs) aborts the run (default 600)\n"
    "  SIGINT, SIGTERM, SIGHUP stop the run before its next step (a blocked\n"
    "  read wakes), abort the job's other processes, say how far it got and\n"
    "  the last checkpoint, and exit with 128 + the signal.\n"
    "  Under torchrun (RANK, WORLD_SIZE, LOCAL_RANK set) each process drives\n"
    "  GPU LOCAL_RANK.\n"
    "  --checkpoint PATH      written every --checkpoint-every K steps and at\n"
    "                         the end (atomically)\n"
    "  --resume PATH          continue from a checkpoint\n"
    "  --log-every N          a log line every N steps (default 10)\n"
    "  A NaN or infinite loss stops the run with an error naming the step\n"
    "  (exit 1; the last checkpoint is kept): the training loss at each log\n"
    "  line, the evaluation loss, the weights at each checkpoint and the end.\n"
    "  --log-checksums        per-rank weight checksums in each log line\n"
    "  --json FILE            log lines and the final summary as JSON lines\n"
    "  --log-rows FILE        every step's rows: a line 'STEP EPOCH BATCH "
    "RANK\n"
    "                         SOURCE KEY' per valid row (a process writes its\n"
    "                         own ranks' rows: one file per node); KEY as\n"
    "                         `wds batches` writes keys: a blank, control,\n"
    "                         backslash or non-UTF-8 byte as \\xHH\n"
    "  --json and --log-rows are logs, written as the run goes (a killed run\n"
    "  leaves what it logged); a FIFO or device in place; a symlink to one\n"
    "  refused, one to a file replaced\n"
    "Reading shards (as `wds batches` takes them):\n";

/* The loader options wds-train takes through tools/loader_opts.c: one
 * spelling, parser, message and help text with `wds batches` and `wds
 * bench`. Those whose defaults differ here (image size, shuffle buffer,
 * mode, workers...) keep their own help lines above. */
static const char *const loader_names[] = {"index",
                                           "image-size",
                                           "crop",
                                           "crop-scale",
                                           "crop-ratio",
                                           "flip-prob",
                                           "brightness",
                                           "contrast",
                                           "saturation",
                                           "hue",
                                           "mode",
                                           "samples-per-epoch",
                                           "last-batch",
                                           "shuffle-buffer",
                                           "workers",
                                           "read-timeout",
                                           "retries",
                                           "max-window",
                                           "max-sample-bytes",
                                           "rank-batch-sizes",
                                           "cache-dir",
                                           "cache-size",
                                           "allow-pipe-from-files",
                                           "source",
                                           "defer-reads",
                                           "image-memory-limit",
                                           "jpeg-decode",
                                           NULL};
static const char *const loader_help_names[] = {
    "index",      "crop",        "crop-scale",         "crop-ratio",
    "flip-prob",  "brightness",  "contrast",           "saturation",
    "hue",        "workers",     "read-timeout",       "retries",
    "max-window", "cache-dir",   "cache-size",         "allow-pipe-from-files",
    "source",     "defer-reads", "image-memory-limit", "jpeg-decode",
    NULL};

#define PROG "wds-train"

/* --rank-batch-sizes: at most this many ranks. */
#define TR_MAX_RANK_SIZES 65536

#define usage_error(...) tool_usage_error(PROG, __VA_ARGS__)

/* Digits only, as every tool's numbers (tools/opts.c). */
static int parse_u64(const char *s, uint64_t *out) {
  return tool_parse_u64(s, out);
}

/* wds-train's own number flags, in the loader option table's wording
 * (loader/options.c): "--ranks needs a whole number in 1..1024, not "0"".
 * 0, or the usage error's exit status. */
static int flag_u64(const char *flag, const char *a, uint64_t lo, uint64_t hi,
                    uint64_t *out) {
  uint64_t v;
  if (parse_u64(a, &v) == 0 && v >= lo && v <= hi) {
    *out = v;
    return 0;
  }
  if (hi == UINT64_MAX)
    return usage_error("--%s needs a whole number of at least %llu, not \"%s\"",
                       flag, (unsigned long long)lo, a);
  return usage_error("--%s needs a whole number in %llu..%llu, not \"%s\"",
                     flag, (unsigned long long)lo, (unsigned long long)hi, a);
}

static int flag_int(const char *flag, const char *a, int lo, int hi, int *out) {
  uint64_t v = 0;
  int rc = flag_u64(flag, a, (uint64_t)lo, (uint64_t)hi, &v);
  if (rc == 0)
    *out = (int)v;
  return rc;
}

static int parse_double(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= 0.0) || isinf(v))
    return -1;
  *out = v;
  return 0;
}

static int parse_hidden(const char *s, tr_options *o) {
  o->hidden_count = 0;
  while (*s) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || v < 1 || v > 65536 ||
        o->hidden_count >= TR_MAX_LAYERS - 1)
      return -1;
    o->hidden[o->hidden_count++] = (int)v;
    if (*end == ',')
      end++;
    else if (*end)
      return -1;
    s = end;
  }
  return 0;
}

enum {
  O_TRAIN = 256,
  O_EVAL,
  O_CHANNELS,
  O_HIDDEN,
  O_CLASSES,
  O_LR,
  O_MOM,
  O_WD,
  O_WARMUP,
  O_SEED,
  O_BATCH,
  O_EPOCHS,
  O_STEPS,
  O_STOP,
  O_DEVICE,
  O_RANKS,
  O_GPUS,
  O_NODES,
  O_NODE_RANK,
  O_CKPT,
  O_CKPT_EVERY,
  O_RESUME,
  O_LOG_EVERY,
  O_LOG_SUMS,
  O_JSON,
  O_LOG_ROWS,
  O_MASTER_ADDR,
  O_MASTER_PORT,
  O_RDV_TIMEOUT,
  O_COLL_TIMEOUT,
  O_PRECISION,
  O_HELP,
  O_VERSION
};

static const struct option long_opts[] = {
    {"train", required_argument, 0, O_TRAIN},
    {"eval", required_argument, 0, O_EVAL},
    {"channels", required_argument, 0, O_CHANNELS},
    {"hidden", required_argument, 0, O_HIDDEN},
    {"classes", required_argument, 0, O_CLASSES},
    {"lr", required_argument, 0, O_LR},
    {"momentum", required_argument, 0, O_MOM},
    {"weight-decay", required_argument, 0, O_WD},
    {"warmup-steps", required_argument, 0, O_WARMUP},
    {"seed", required_argument, 0, O_SEED},
    {"batch-size", required_argument, 0, O_BATCH},
    {"epochs", required_argument, 0, O_EPOCHS},
    {"steps", required_argument, 0, O_STEPS},
    {"stop-after", required_argument, 0, O_STOP},
    {"device", required_argument, 0, O_DEVICE},
    {"ranks", required_argument, 0, O_RANKS},
    {"gpus", required_argument, 0, O_GPUS},
    {"nodes", required_argument, 0, O_NODES},
    {"node-rank", required_argument, 0, O_NODE_RANK},
    {"checkpoint", required_argument, 0, O_CKPT},
    {"checkpoint-every", required_argument, 0, O_CKPT_EVERY},
    {"resume", required_argument, 0, O_RESUME},
    {"log-every", required_argument, 0, O_LOG_EVERY},
    {"log-checksums", no_argument, 0, O_LOG_SUMS},
    {"json", required_argument, 0, O_JSON},
    {"log-rows", required_argument, 0, O_LOG_ROWS},
    {"master-addr", required_argument, 0, O_MASTER_ADDR},
    {"master-port", required_argument, 0, O_MASTER_PORT},
    {"rdv-timeout", required_argument, 0, O_RDV_TIMEOUT},
    {"collective-timeout", required_argument, 0, O_COLL_TIMEOUT},
    {"precision", required_argument, 0, O_PRECISION},
    {"help", no_argument, 0, O_HELP},
    {"version", no_argument, 0, O_VERSION},
    {0, 0, 0, 0}};

/* The flags of wds-train's own rendezvous, removed with it: a usage error
 * naming what replaces them. */
static int retired_flag(int code) {
  const char *name = code == O_NODES         ? "nodes"
                     : code == O_NODE_RANK   ? "node-rank"
                     : code == O_MASTER_ADDR ? "master-addr"
                     : code == O_MASTER_PORT ? "master-port"
                                             : "rdv-timeout";
  return usage_error(
      "--%s is gone with wds-train's own rendezvous: launch several "
      "processes with mpirun -np N wds-train ... or srun --mpi=pmix (a "
      "wds-train built with WDS_WITH_MPI; the topology comes from MPI), or "
      "torchrun --no-python wds-train on GPUs (NCCL meets at NCCL_COMM_ID, "
      "default MASTER_ADDR:MASTER_PORT+1)",
      name);
}

/* The library's warnings without a log to go to (shards/netrc.h). */
static void warn_stderr(const char *msg) {
  fprintf(stderr, "wds-train: %s\n", msg);
}

static int run_main(int argc, char **argv);

/* Under MPI: MPI_Finalize after a good run; after a failed one (its message
 * printed) MPI_Abort, which ends the job's other processes at once. */
int main(int argc, char **argv) {
  int rc = run_main(argc, argv);
#ifdef WDS_TRAINER_MPI
  if (tr_mpi_active()) {
    if (rc != 0)
      tr_mpi_abort(rc);
    tr_mpi_finalize();
  }
#endif
  return rc;
}

static int run_main(int argc, char **argv) {
  wds__netrc_set_warn_sink(warn_stderr);
  /* Static: what the options allocate (the --source list, in
   * o.loader.sources) stays reachable on every return. */
  static tr_options o;
  tr_options_init(&o);
  /* The log on stdout is an output like the wds tools' (tools/util.c): at
   * exit it is flushed and closed, and if writing it failed at any time the
   * process says so (tr_run already did when the run got that far) and
   * exits 1. The run is not stopped early for it: the checkpoint is what a
   * run is for. */
  tool_stdout_init_prog("wds-train");
  const char *device = "auto";
  int gpus = -1, ranks_given = 0, c, rc;
  int batch_given = 0;
  uint64_t u;
  double d;
  struct option opts[64];
  /* The loader options, wds-train's own among them (--train, --seed,
   * --batch-size), are parsed into lo.cfg over wds-train's defaults, and
   * lo.cfg becomes o.loader. Static, as o. */
  static tool_loader_opts lo;
  tool_loader_opts_init(&lo);
  lo.cfg = o.loader;
  if (tool_loader_options_some(long_opts, loader_names, opts,
                               sizeof opts / sizeof *opts) != 0)
    return 2;
  optind = 1;
  while ((c = tool_getopt(PROG, argc, argv, "", opts)) != -1) {
    const char *a = optarg;
    switch (c) {
    case O_TRAIN:
      lo.cfg.spec = a;
      break;
    case O_EVAL:
      o.eval_spec = a;
      break;
    case O_CHANNELS:
      if (strcmp(a, "1") == 0)
        o.channels = 1;
      else if (strcmp(a, "3") == 0)
        o.channels = 3;
      else
        return usage_error("--channels must be 1 or 3, not \"%s\"", a);
      break;
    case O_HIDDEN:
      if (parse_hidden(a, &o) != 0)
        return usage_error("--hidden needs a list of layer widths (e.g. "
                           "256,128), not \"%s\"",
                           a);
      break;
    case O_CLASSES:
      if ((rc = flag_int("classes", a, 2, 1 << 20, &o.classes)) != 0)
        return rc;
      break;
    case O_LR:
      if (parse_double(a, &o.lr) != 0)
        return usage_error("--lr needs a number of at least 0, not \"%s\"", a);
      break;
    case O_MOM:
      if (parse_double(a, &d) != 0 || d >= 1.0)
        return usage_error("--momentum needs a number from 0 to below 1, not "
                           "\"%s\"",
                           a);
      o.momentum = d;
      break;
    case O_WD:
      if (parse_double(a, &o.weight_decay) != 0)
        return usage_error("--weight-decay needs a number of at least 0, not "
                           "\"%s\"",
                           a);
      break;
    case O_WARMUP:
      if ((rc = flag_u64("warmup-steps", a, 0, UINT64_MAX, &o.warmup_steps)) !=
          0)
        return rc;
      break;
    case O_SEED:
      if ((rc = flag_u64("seed", a, 0, UINT64_MAX, &lo.cfg.seed)) != 0)
        return rc;
      break;
    case O_BATCH:
      if ((rc = flag_u64("batch-size", a, 1, 1u << 20, &u)) != 0)
        return rc;
      lo.cfg.batch_size = (size_t)u;
      batch_given = 1;
      break;
    case O_EPOCHS:
      if ((rc = flag_u64("epochs", a, 1, UINT64_MAX, &o.epochs)) != 0)
        return rc;
      break;
    case O_STEPS:
      if ((rc = flag_u64("steps", a, 1, UINT64_MAX, &o.steps)) != 0)
        return rc;
      break;
    case O_STOP:
      if ((rc = flag_u64("stop-after", a, 1, UINT64_MAX, &o.stop_after)) != 0)
        return rc;
      break;
    case O_DEVICE:
      if (strcmp(a, "cpu") && strcmp(a, "cuda") && strcmp(a, "auto"))
        return usage_error("--device must be cpu, cuda or auto, not \"%s\"", a);
      device = a;
      break;
    case O_RANKS:
      if ((rc = flag_int("ranks", a, 1, 1024, &o.ranks)) != 0)
        return rc;
      ranks_given = 1;
      break;
    case O_GPUS:
      if ((rc = flag_int("gpus", a, 1, 1024, &gpus)) != 0)
        return rc;
      break;
    case O_NODES:
    case O_NODE_RANK:
    case O_MASTER_ADDR:
    case O_MASTER_PORT:
    case O_RDV_TIMEOUT:
      return retired_flag(c);
    case O_CKPT:
      o.checkpoint_path = a;
      break;
    case O_CKPT_EVERY:
      if ((rc = flag_u64("checkpoint-every", a, 0, UINT64_MAX,
                         &o.checkpoint_every)) != 0)
        return rc;
      break;
    case O_RESUME:
      o.resume_path = a;
      break;
    case O_LOG_EVERY:
      if ((rc = flag_u64("log-every", a, 0, UINT64_MAX, &o.log_every)) != 0)
        return rc;
      break;
    case O_LOG_SUMS:
      o.log_checksums = 1;
      break;
    case O_JSON:
      o.json_path = a;
      break;
    case O_LOG_ROWS:
      o.rows_path = a;
      break;
    case O_COLL_TIMEOUT:
      if (parse_double(a, &d) != 0 || d <= 0 || d > 86400)
        return usage_error("--collective-timeout needs seconds (more than 0, "
                           "at most 86400), not \"%s\"",
                           a);
      o.collective_timeout_ms = (int)(d * 1000.0 + 0.5);
      break;
    case O_PRECISION:
      if (strcmp(a, "auto") == 0)
        o.precision = TR_PRECISION_AUTO;
      else if (strcmp(a, "tf32") == 0)
        o.precision = TR_PRECISION_TF32;
      else if (strcmp(a, "fp32") == 0)
        o.precision = TR_PRECISION_FP32;
      else
        return usage_error("--precision must be auto, tf32 or fp32, not \"%s\"",
                           a);
      break;
    case O_HELP:
      errno = 0;
      fputs(usage_text, stdout);
      fputs(usage_text_2, stdout);
#ifdef WDS_TRAINER_MPI
      fputs("  (this wds-train is built with MPI)\n", stdout);
#else
      fputs("  (this wds-train is built without MPI: under mpirun or srun it "
            "refuses to start)\n",
            stdout);
#endif
      tool_loader_opts_help_some(stdout, loader_help_names);
      fputs("\n" WDS__SIZE_HELP, stdout);
      /* Longer than a buffer: a write may fail on the way (errno is then
       * its reason, which the exit handler would no longer know). */
      return tool_stdout_flush() != 0;
    case O_VERSION:
      printf("wds %s\n", wds_version());
      return 0;
    case TOOL_OPT_BAD:
      return 2;
    default:
      if (tool_loader_opt(&lo, c, a, PROG) != 1)
        return 2;
      if (c == TOOL_LO_RANK_BATCH_SIZES) {
        /* Into storage that outlives lo (no leak on an early return). */
        static size_t rank_bs[TR_MAX_RANK_SIZES];
        size_t n = lo.cfg.rank_batch_size_count;
        if (n > TR_MAX_RANK_SIZES)
          return usage_error("--rank-batch-sizes: %zu ranks (at most %d)", n,
                             TR_MAX_RANK_SIZES);
        memcpy(rank_bs, lo.cfg.rank_batch_sizes, n * sizeof *rank_bs);
        lo.cfg.rank_batch_sizes = rank_bs;
        free(lo.rank_bs);
        lo.rank_bs = NULL;
      }
    }
  }
  /* What wds-train refuses of the loader options, and what
   * tool_loader_opts_finish would do that applies here. */
  if (lo.cfg.image_size > 4096)
    return usage_error("--image-size %d: wds-train takes at most 4096",
                       lo.cfg.image_size);
  if (lo.cfg.mode == WDS_MODE_PLAIN)
    return usage_error("--mode plain gives ranks unequal steps: wds-train "
                       "takes exact or resampled");
  if (lo.cfg.rank_batch_size_count && batch_given)
    return usage_error("%s", "--batch-size and --rank-batch-sizes: give "
                             "one (--rank-batch-sizes sets every rank's)");
  if (tool_cache_finish(PROG, &lo.cfg.cache_dir, lo.cfg.cache_size) != 0)
    return 2;
  if (lo.nsources) {
    if (lo.cfg.spec)
      return usage_error("%s", "--train and --source: give one (--train "
                               "SPEC is --source SPEC alone)");
    lo.cfg.sources = lo.sources; /* kept by o.loader once lo is freed */
    lo.cfg.source_count = lo.nsources;
    lo.sources = NULL;
    lo.nsources = 0;
  }
  o.loader = lo.cfg;
  tool_loader_opts_free(&lo);
  if (optind < argc)
    return usage_error("unexpected argument '%s'", argv[optind]);
  if (!o.loader.spec && !o.loader.source_count)
    return usage_error("%s", "--train SPEC is required (or --source, once "
                             "per source of a mix)");
  /* The rules between loader options (the library's one check). */
  if (wds_loader_config_check(&o.loader, WDS_OPTION_NAMES_FLAG) != WDS_OK)
    return usage_error("%s", wds_last_error());
  if (o.checkpoint_every && !o.checkpoint_path)
    return usage_error("%s", "--checkpoint-every needs --checkpoint PATH");
  /* A checkpoint named by one of the process's own descriptors is written
   * through it at its offset (wds/outfile.h): a second one would follow the
   * first and --resume would refuse the file. */
  if (o.checkpoint_every && o.checkpoint_path &&
      (strcmp(o.checkpoint_path, "/dev/stdout") == 0 ||
       strcmp(o.checkpoint_path, "/dev/stderr") == 0 ||
       strncmp(o.checkpoint_path, "/dev/fd/", 8) == 0 ||
       strncmp(o.checkpoint_path, "/proc/self/fd/", 14) == 0))
    return usage_error("--checkpoint-every: --checkpoint %s is one of the "
                       "process's own descriptors, written at its offset, so "
                       "each checkpoint would follow the previous one and "
                       "--resume would refuse the file; name a file (or "
                       "leave out --checkpoint-every for one checkpoint at "
                       "the end)",
                       o.checkpoint_path);
  if (o.stop_after && !o.checkpoint_path)
    return usage_error("%s", "--stop-after needs --checkpoint PATH");
  /* Before any GPU is looked for: a usage error on every machine. */
  if (ranks_given && strcmp(device, "cpu") != 0 && strcmp(device, "auto") != 0)
    return usage_error("--ranks is for --device cpu (rank threads); with "
                       "--device %s the ranks are GPUs: --gpus N (default: "
                       "every GPU)",
                       device);
  /* Topology: torchrun's RANK/WORLD_SIZE/LOCAL_RANK (one process per GPU,
   * meeting through NCCL); else MPI's under mpirun or srun; else a single
   * process (launch.h). Decided before MPI_Init: torchrun's children inherit
   * the mpirun or srun task's variables, which then name torchrun's agent,
   * and each child calling MPI_Init under that one identity would hang. */
  tr_launch topo;
  wds__err terr;
  /* The launcher's variables (read before MPI_Init, which may set its
   * own), by the one rule (base/topology.h). */
  wds__topology et;
  if (wds__topology_from_env(&et, NULL, NULL, &terr) != WDS_OK)
    return usage_error("%s", terr.msg);
#ifdef WDS_TRAINER_MPI
  /* Launched by mpirun, mpiexec or srun (and not torchrun inside one): the
   * topology is MPI's. */
  if (et.launcher != WDS__LAUNCHER_TORCHRUN && tr_mpi_launched()) {
    /* The launcher's variables must name the rank MPI gives: set by hand
     * without a launcher, MPI starts a job of one process (a singleton),
     * and each such process would be a job of its own. */
    tr_mpi_topology mt;
    if (tr_mpi_init(&mt, &terr) != WDS_OK) {
      fprintf(stderr, "wds-train: %s\n", terr.msg);
      return 1;
    }
    if (et.launcher != WDS__LAUNCHER_NONE &&
        (et.world_size != mt.size || et.rank != mt.rank))
      return usage_error("%s=%d and %s=%d make this process rank %d of %d, "
                         "but MPI says process %d of %d: it was not started "
                         "by the launcher those variables are from (start "
                         "every process with mpirun or srun)",
                         et.rank_var, et.rank, et.size_var, et.world_size,
                         et.rank, et.world_size, mt.rank, mt.size);
    memset(&topo, 0, sizeof topo);
    topo.per_process = 1;
    topo.procs = mt.size;
    topo.proc_rank = mt.rank;
    topo.local_rank = mt.local_rank;
    snprintf(topo.source, sizeof topo.source, "MPI, %d node%s", mt.nodes,
             mt.nodes == 1 ? "" : "s");
    o.mpi = 1;
  } else
#endif
      if (tr_launch_resolve(&topo, NULL, NULL, &terr) != WDS_OK) {
    return usage_error("%s", terr.msg);
  }
  o.procs = topo.procs;
  o.proc_rank = topo.proc_rank;
  if (topo.per_process)
    o.first_device = topo.local_rank;

  /* The backend, from the registry (backends.c): --device NAME, or auto:
   * the first available one (a device backend with a device visible, else
   * the CPU). why says why a device backend is not available. */
  wds__err why;
  why.msg[0] = '\0';
  const tr_backend *best = tr_backend_auto(&why);
  if (strcmp(device, "auto") == 0) {
    o.backend = best; /* --ranks is the CPU's rank count: not used */
  } else {
    o.backend = tr_backend_find(device);
    if (!o.backend) {
      fprintf(stderr,
              "wds-train: --device %s: not built with CUDA (this "
              "wds-train has the CPU backend only; use --device "
              "cpu)\n",
              device);
      return 1;
    }
    if (!tr_backend_available(o.backend, &why)) {
      fprintf(stderr, "wds-train: --device %s: no CUDA GPU found (%s)\n",
              device, why.msg);
      return 1;
    }
  }
  /* Several processes without MPI: NCCL's collectives only (launch.h). */
  if (tr_launch_check_backend(&topo, o.mpi, o.backend->host_collectives,
                              &terr) != WDS_OK)
    return usage_error("%s", terr.msg);
  /* NCCL's bootstrap address, for every process to derive the same id
   * (before any NCCL call; NCCL reads it at ncclGetUniqueId and
   * ncclCommInitRank). */
  if (!o.mpi && tr_launch_export_comm_id(&topo, &terr) != WDS_OK) {
    fprintf(stderr, "wds-train: %s\n", terr.msg);
    return 1;
  }
  int visible = o.backend->device_count ? o.backend->device_count(&why) : 0;
  if (!o.backend->device_count && gpus > 0) {
    return usage_error("--gpus: the CPU backend uses --ranks%s%s",
                       why.msg[0] ? "; no GPU: " : "", why.msg);
  }
  if (o.backend->device_count) {
    if (topo.per_process) {
      if (gpus > 1) {
        return usage_error("--gpus %d: under %s each process drives one "
                           "GPU (its local rank)",
                           gpus, o.mpi ? "mpirun or srun" : "torchrun");
      }
      if (o.first_device >= visible) {
        fprintf(stderr,
                "wds-train: %s%d, but %d GPU%s visible (one process per "
                "GPU: start at most %d on this node)\n",
                o.mpi ? "MPI local rank " : "LOCAL_RANK=", o.first_device,
                visible, visible == 1 ? " is" : "s are", visible);
        return 1;
      }
      o.ranks = 1;
    } else {
      if (gpus > visible) {
        fprintf(stderr, "wds-train: --gpus %d, but %d GPU%s visible\n", gpus,
                visible, visible == 1 ? " is" : "s are");
        return 1;
      }
      o.ranks = gpus > 0 ? gpus : visible;
    }
  }
  if (o.loader.rank_batch_size_count) {
    size_t n = o.loader.rank_batch_size_count;
    if (!o.backend->device_count && !ranks_given && o.procs == 1 && n <= 1024)
      o.ranks = (int)n; /* CPU: one rank thread per size */
    if (n != (size_t)o.procs * (size_t)o.ranks)
      return usage_error(
          "--rank-batch-sizes gives %zu ranks, but the job has %d (%d "
          "process%s x %d rank%s)",
          n, o.procs * o.ranks, o.procs, o.procs == 1 ? "" : "es", o.ranks,
          o.ranks == 1 ? "" : "s");
  }

  /* SIGINT, SIGTERM, SIGHUP: the loaders are cancelled (a blocked read
   * wakes), rank 0 stops before the next step, the run says how far it got
   * and exits with an error, which ends the job's other processes (under
   * MPI, MPI_Abort; under torchrun, its agent). */
  tool_signals_install();
  o.interrupted = tool_signal_caught;
  o.watch_loader = tool_signals_loader;
  wds__err err;
  rc = tr_run(&o, &err);
  if (rc == WDS_ERR_CANCELLED && tool_signal_caught()) {
    fflush(stdout);
    fprintf(stderr, "wds-train: interrupted by %s; %s\n", tool_signal_name(),
            err.msg);
    return tool_signal_status();
  }
  if (rc != WDS_OK) {
    fprintf(stderr, "wds-train: %s\n", err.msg);
    tool_stdout_said();
    return 1;
  }
  return 0;
}
