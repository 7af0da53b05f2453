/* The plain MPI peer of `gradsync bench allreduce --backend mpi`: MPI_Allreduce called
 * directly, with no gradsync in the process. It prints the rows gradsync's bench prints
 * (backend "mpi-plain"), with the same data, check and timing rules, so that each row pairs
 * with the mpi row of the same size (docs/benchmarks.md). Run it as the bench runs its ranks
 * (launch/mpirun_command.h): Open MPI over TCP on loopback, not its shared-memory transport.
 *
 *   mpirun [--allow-run-as-root] --oversubscribe --bind-to none -np 4 \
 *       --mca btl self,tcp --mca btl_tcp_if_include lo \
 *       mpi_allreduce_plain -b 4K -e 64M [-f 2] [-w 5] [--iters 0] [--seconds 0.3] \
 *                           [--nonblocking]
 *
 * Out of place is MPI_Allreduce(in, out); in place, MPI_Allreduce(MPI_IN_PLACE, out).
 * --nonblocking calls MPI_Iallreduce and MPI_Wait instead (backend "mpi-iplain"): Open MPI runs
 * the blocking call in its tuned component and the non-blocking one in libnbc, whose algorithms
 * differ (up to 2x). gradsync's mpi backend makes the blocking call (under
 * MPI_THREAD_MULTIPLE; MPI_Iallreduce polled only where MPI gives SERIALIZED), so mpi-plain
 * against mpi is gradsync's own overhead, and mpi-iplain against mpi-plain libnbc's.
 * Rank 0 prints; the exit code is 1 when any element came out wrong. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PERIOD 32749 /* the data's period, as gradsync's plug-in */

struct options {
  size_t min_bytes, max_bytes;
  int factor, warmup, iters;
  double seconds; /* with iters 0: timed work per form, as gradsync's --seconds */
  int nonblocking; /* MPI_Iallreduce + MPI_Wait instead of MPI_Allreduce */
};

static size_t parse_size(const char* text) {
  char* end = NULL;
  size_t value = strtoull(text, &end, 10);
  if (*end == 'K' || *end == 'k') value <<= 10;
  if (*end == 'M' || *end == 'm') value <<= 20;
  if (*end == 'G' || *end == 'g') value <<= 30;
  return value;
}

static int parse(int argc, char** argv, struct options* o) {
  o->min_bytes = 4096, o->max_bytes = 64 << 20, o->factor = 2, o->warmup = 5, o->iters = 0;
  o->seconds = 0.3;
  o->nonblocking = 0;
  for (int i = 1; i < argc; i += 2) {
    if (strcmp(argv[i], "--nonblocking") == 0) {
      o->nonblocking = 1;
      --i; /* a flag: no value follows */
      continue;
    }
    if (i + 1 >= argc) return 0;
    const char* value = argv[i + 1];
    if (strcmp(argv[i], "-b") == 0)
      o->min_bytes = parse_size(value);
    else if (strcmp(argv[i], "-e") == 0)
      o->max_bytes = parse_size(value);
    else if (strcmp(argv[i], "-f") == 0)
      o->factor = atoi(value);
    else if (strcmp(argv[i], "-w") == 0)
      o->warmup = atoi(value);
    else if (strcmp(argv[i], "--iters") == 0)
      o->iters = atoi(value);
    else if (strcmp(argv[i], "--seconds") == 0)
      o->seconds = atof(value);
    else
      return 0;
  }
  return o->factor >= 2 && o->min_bytes >= 4 && o->max_bytes >= o->min_bytes && o->seconds > 0;
}

/* The backend column: at most 10 characters, the column's width. */
static const char* backend_name(const struct options* o) {
  return o->nonblocking ? "mpi-iplain" : "mpi-plain";
}

/* Rank r holds (r + 1) + p(i): the sum is n(n+1)/2 + n p(i), exact in float. Out of place the
 * output starts at -1, so that an output MPI never wrote shows. */
static void init(int rank, size_t count, int in_place, float* in, float* out) {
  float* data = in_place ? out : in;
  for (size_t i = 0; i < count; ++i) data[i] = (float)(rank + 1) + (float)(i % PERIOD);
  if (!in_place) {
    for (size_t i = 0; i < count; ++i) out[i] = -1.0f;
  }
}

static void allreduce(float* in, float* out, size_t count, int in_place, int nonblocking) {
  const void* send = in_place ? MPI_IN_PLACE : in;
  if (!nonblocking) {
    MPI_Allreduce(send, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return;
  }
  MPI_Request request;
  MPI_Iallreduce(send, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
  MPI_Wait(&request, MPI_STATUS_IGNORE);
}

static int compare_doubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* The warm-up with --iters 0: each call timed, at least three of them; returns their median
 * (gradsync's rule, bench/collective_sweep.cpp). */
static double median_call(const struct options* o, float* in, float* out, size_t count,
                          int in_place) {
  const int calls = o->warmup > 3 ? o->warmup : 3;
  double* times = malloc(sizeof(double) * (size_t)calls);
  if (!times) {
    fprintf(stderr, "mpi_allreduce_plain: out of memory for %d warm-up times (-w)\n", calls);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (int k = 0; k < calls; ++k) {
    times[k] = MPI_Wtime();
    allreduce(in, out, count, in_place, o->nonblocking);
    times[k] = MPI_Wtime() - times[k];
  }
  qsort(times, (size_t)calls, sizeof(double), compare_doubles);
  const double median = times[calls / 2];
  free(times);
  return median;
}

/* One form of one size: warm-up (auto: each call timed, the slowest rank's median deciding the
 * iterations for ~o->seconds), a barrier, the timed loop, then a fresh run checked. Returns on
 * every rank the slowest rank's mean time; *wrong is summed over ranks. */
static double measure(const struct options* o, int rank, int n, size_t count, int in_place,
                      float* in, float* out, double* wrong) {
  init(rank, count, in_place, in, out);
  int iters = o->iters;
  if (iters == 0) {
    double call = median_call(o, in, out, count, in_place);
    MPI_Allreduce(MPI_IN_PLACE, &call, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    iters = (int)ceil(o->seconds / (call > 1e-7 ? call : 1e-7));
    iters = iters < 5 ? 5 : iters > 1000 ? 1000 : iters;
  } else {
    for (int k = 0; k < o->warmup; ++k) allreduce(in, out, count, in_place, o->nonblocking);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double mean = MPI_Wtime();
  for (int k = 0; k < iters; ++k) allreduce(in, out, count, in_place, o->nonblocking);
  mean = (MPI_Wtime() - mean) / iters;
  init(rank, count, in_place, in, out);
  allreduce(in, out, count, in_place, o->nonblocking);
  double mine = 0;
  for (size_t i = 0; i < count; ++i) {
    mine += out[i] != (float)(n * (n + 1) / 2) + (float)n * (float)(i % PERIOD);
  }
  MPI_Allreduce(&mine, wrong, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &mean, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return mean;
}

/* nccl-tests' getFloatStr: two decimals, fewer before the field overflows. */
static void fit(double value, int width, char* text, size_t size) {
  if (snprintf(text, size, "%*.2f", width, value) <= width) return;
  if (snprintf(text, size, "%*.1f", width, value) <= width) return;
  if (snprintf(text, size, "%*.0f", width, value) <= width) return;
  snprintf(text, size, width >= 7 ? "%*.1e" : "%*.0e", width, value);
}

static void header(const struct options* o, int n, double factor) {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(version, &length);
  version[strcspn(version, ",\n")] = '\0';
  printf("# mpi_allreduce_plain\n# Collective test starting: mpi_allreduce_plain\n");
  printf(
      "# nRanks %d (processes started by mpirun) minBytes %zu maxBytes %zu step: %d(factor) "
      "warmup iters: %d iters: ",
      n, o->min_bytes, o->max_bytes, o->factor, o->warmup);
  if (o->iters > 0)
    printf("%d validation: 1\n", o->iters);
  else
    printf("0 (auto, ~%g s per form) validation: 1\n", o->seconds);
  printf(
      "# allreduce; type float; time: max over ranks of the mean per-iteration time; "
      "busbw = algbw * %.4g\n#\n# Using backends\n",
      factor);
  printf("#  %-10s %s %s called directly (no gradsync)\n#\n", backend_name(o), version,
         o->nonblocking ? "MPI_Iallreduce + MPI_Wait (libnbc)" : "MPI_Allreduce (tuned)");
  printf(
      "# %8s  %12s  %12s  %8s  %6s  %6s           out-of-place                       "
      "in-place          \n",
      "", "", "", "", "", "");
  printf("# %8s  %12s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "backend",
         "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
         "algbw", "busbw", "#wrong");
  printf("# %8s  %12s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "", "(B)",
         "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  fflush(stdout);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  struct options o;
  if (!parse(argc, argv, &o)) {
    if (rank == 0)
      fprintf(stderr,
              "mpi_allreduce_plain: usage: -b MIN -e MAX [-f 2] [-w 5] [--iters 0] [--seconds 0.3] "
              "[--nonblocking]\n");
    MPI_Finalize();
    return 2;
  }
  const size_t max_count = o.max_bytes / sizeof(float) > 0 ? o.max_bytes / sizeof(float) : 1;
  float* in = malloc(max_count * sizeof(float));
  float* out = malloc(max_count * sizeof(float));
  const double factor = n > 1 ? 2.0 * (n - 1) / n : 0.0;
  if (rank == 0) header(&o, n, factor);
  double wrong_total = 0, busbw_sum = 0;
  int forms = 0;
  for (size_t bytes = o.min_bytes;; bytes *= (size_t)o.factor) {
    const size_t count = bytes / sizeof(float) > 0 ? bytes / sizeof(float) : 1;
    if (rank == 0) {
      printf("%10s  %12zu  %12zu  %8s  %6s  %6i", backend_name(&o), count * sizeof(float), count,
             "float", "sum", -1);
    }
    for (int in_place = 0; in_place <= 1; ++in_place) {
      double wrong = 0;
      const double seconds = measure(&o, rank, n, count, in_place, in, out, &wrong);
      const double algbw = (double)(count * sizeof(float)) / seconds / 1e9;
      char time_text[32], algbw_text[32], busbw_text[32];
      fit(seconds * 1e6, 7, time_text, sizeof time_text);
      fit(algbw, 6, algbw_text, sizeof algbw_text);
      fit(algbw * factor, 6, busbw_text, sizeof busbw_text);
      if (rank == 0) printf("  %7s  %6s  %6s  %6g", time_text, algbw_text, busbw_text, wrong);
      wrong_total += wrong;
      busbw_sum += algbw * factor;
      ++forms;
    }
    if (rank == 0) {
      printf("\n");
      fflush(stdout);
    }
    if (bytes > o.max_bytes / (size_t)o.factor) break;
  }
  if (rank == 0) {
    printf("# %-20s : %.0f %s\n", "Out of bounds values", wrong_total,
           wrong_total > 0 ? "FAILED" : "OK");
    printf("# %-20s : %g \n#\n# Collective test concluded: mpi_allreduce_plain\n#\n",
           "Avg bus bandwidth", busbw_sum / forms);
    fflush(stdout);
  }
  free(in);
  free(out);
  MPI_Finalize();
  return wrong_total > 0 ? 1 : 0;
}
