/*
 * spank_gpupool: a Slurm SPANK plugin that gives a job step slices of gpupool GPUs.
 *
 *   srun --gpupool=2x0.5 prog          two half-GPU slices for the step
 *   srun --gpupool=1 --gpupool-mem=6GiB --gpupool-class=a100 prog
 *   sbatch --gpupool=2x0.5 job.sh      the batch script's step gets the lease; srun steps inside share it
 *
 * On each node of the step, slurmstepd runs `gp-lease hold` (as the job's user) once, before the tasks start; the
 * tasks get GPUPOOL_LEASE and gpupool's libcuda.so.1 directory first on LD_LIBRARY_PATH, as gp-run gives its
 * command. When the step ends (normally, cancelled, timed out) the plugin tells gp-lease to release the lease (it
 * watches its standard input, whose other end is ours); if gp-lease is gone by then, `gp-lease release` releases it
 * by its token. If slurmstepd itself dies, gp-lease sees its input close and releases; if the node dies, the agents
 * free the lease when its TTL passes. A request the pool cannot grant fails every task of the step with a message
 * on the task's stderr (srun's terminal, the batch job's output file).
 *
 * plugstack.conf arguments (all optional):
 *   servers=ADDR[,ADDR...]  the pool, when the job's environment names none (GPUPOOL_SERVERS / GPUPOOL_POOL)
 *   pool=FILE               a pool file, likewise
 *   gp_lease=PATH           the gp-lease program (default: beside this plugin's installation, ../../../bin)
 *   libdir=DIR              gpupool's libcuda.so.1 directory (default: ../cuda from this plugin)
 *   wait=DURATION           how long a step queues for a busy pool (gp-lease --wait; default 0: fail at once)
 *
 * The plugin is plain C and links nothing of gpupool: all pool work happens in the gp-lease process.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

SPANK_PLUGIN(gpupool, 1);

/* Relative to this plugin's directory, set by CMake for the installed layout and the build tree. */
#ifndef GPUPOOL_SPANK_GP_LEASE_REL
#define GPUPOOL_SPANK_GP_LEASE_REL "../../../bin/gp-lease"
#endif
#ifndef GPUPOOL_SPANK_GP_LEASE_BUILD_REL
#define GPUPOOL_SPANK_GP_LEASE_BUILD_REL "../../../tools/gp-lease"
#endif
#define GPUPOOL_SPANK_LIBDIR_REL "../cuda"

#define MESSAGE_MAX 4096

/* The user's request, from the options. */
static char *opt_gpupool;     /* "2x0.5", "2", "0.5" */
static char *opt_memory;      /* --gpupool-mem */
static char *opt_class;       /* --gpupool-class */
static int opt_active;

/* plugstack.conf arguments. */
static char *arg_servers, *arg_pool, *arg_gp_lease, *arg_libdir, *arg_wait;

/* The step's lease, in slurmstepd. */
static pid_t holder_pid = -1;
static int holder_stdin = -1;
static char *lease_token;
static char failure[MESSAGE_MAX];  /* Why the step has no lease although it asked for one. */

/* The options as one string, so that a step can tell whether an enclosing lease was asked for in the same words. */
static void request_text(char *out, size_t size) {
  snprintf(out, size, "gpupool=%s;mem=%s;class=%s", opt_gpupool ? opt_gpupool : "", opt_memory ? opt_memory : "",
           opt_class ? opt_class : "");
}

static char *xstrdup_or_null(const char *s) { return s ? strdup(s) : NULL; }

/* ---- Option syntax ------------------------------------------------------------------------------------------ */

/* A fraction as gpupool spells it: 0.5, 50%, 1/2; in [0.05, 1]. */
static int parse_fraction(const char *text, double *out) {
  char *end = NULL;
  double value;
  errno = 0;
  value = strtod(text, &end);
  if (end == text || errno != 0) return -1;
  if (*end == '%' && end[1] == '\0') {
    value /= 100.0;
  } else if (*end == '/') {
    char *end2 = NULL;
    double denominator = strtod(end + 1, &end2);
    if (end2 == end + 1 || *end2 != '\0' || denominator <= 0) return -1;
    value /= denominator;
  } else if (*end != '\0') {
    return -1;
  }
  if (!(value >= 0.05 - 1e-9 && value <= 1.0 + 1e-9)) return -1;
  *out = value;
  return 0;
}

/* "N", "NxF" or "F" (a fraction alone: one slice). Fills count and, when given, the fraction's text. */
static int parse_gpupool(const char *spec, long *count, char *fraction, size_t fraction_size, char *why,
                         size_t why_size) {
  const char *x = strchr(spec, 'x');
  double f;
  *count = 1;
  fraction[0] = '\0';
  if (spec[0] == '\0') {
    snprintf(why, why_size, "--gpupool needs a value: N (whole GPUs), NxF (N slices of fraction F) or F");
    return -1;
  }
  if (x != NULL) {
    char *end = NULL;
    *count = strtol(spec, &end, 10);
    if (end != x || *count < 1 || *count > 1024) {
      snprintf(why, why_size, "--gpupool=%s: the count before 'x' must be a whole number from 1 to 1024", spec);
      return -1;
    }
    if (parse_fraction(x + 1, &f) != 0) {
      snprintf(why, why_size, "--gpupool=%s: '%s' is not a fraction of a GPU from 0.05 to 1 (0.5, 50%%, 1/2)", spec,
               x + 1);
      return -1;
    }
    snprintf(fraction, fraction_size, "%s", x + 1);
    return 0;
  }
  if (strchr(spec, '.') == NULL && strchr(spec, '%') == NULL && strchr(spec, '/') == NULL) {
    char *end = NULL;
    *count = strtol(spec, &end, 10);
    if (*end != '\0' || *count < 1 || *count > 1024) {
      snprintf(why, why_size, "--gpupool=%s: expected N (whole GPUs, 1 to 1024), NxF or a fraction F", spec);
      return -1;
    }
    return 0;
  }
  if (parse_fraction(spec, &f) != 0) {
    snprintf(why, why_size, "--gpupool=%s: '%s' is not a fraction of a GPU from 0.05 to 1 (0.5, 50%%, 1/2)", spec,
             spec);
    return -1;
  }
  snprintf(fraction, fraction_size, "%s", spec);
  return 0;
}

static int check_options(char *why, size_t why_size) {
  long count;
  char fraction[64];
  if (opt_gpupool != NULL && parse_gpupool(opt_gpupool, &count, fraction, sizeof(fraction), why, why_size) != 0) {
    return -1;
  }
  if (opt_memory != NULL && opt_gpupool != NULL && fraction[0] != '\0') {
    snprintf(why, why_size, "--gpupool=%s gives a fraction and --gpupool-mem=%s a memory size: give one of them",
             opt_gpupool, opt_memory);
    return -1;
  }
  if (opt_memory != NULL && opt_memory[0] == '\0') {
    snprintf(why, why_size, "--gpupool-mem needs a memory size, e.g. 6GiB");
    return -1;
  }
  return 0;
}

static int set_option(char **slot, const char *value, int remote) {
  char why[512];
  free(*slot);
  *slot = strdup(value ? value : "");
  opt_active = 1;
  if (!remote && check_options(why, sizeof(why)) != 0) {
    slurm_error("gpupool: %s", why);
    return -1;
  }
  return 0;
}

static int cb_gpupool(int val, const char *optarg, int remote) { return set_option(&opt_gpupool, optarg, remote); }
static int cb_memory(int val, const char *optarg, int remote) { return set_option(&opt_memory, optarg, remote); }
static int cb_class(int val, const char *optarg, int remote) { return set_option(&opt_class, optarg, remote); }

static struct spank_option options[] = {
    {"gpupool", "N|NxF|F",
     "GPU slices from the gpupool pool for each step: N whole GPUs, N slices of fraction F (2x0.5), or one slice F",
     1, 0, cb_gpupool},
    {"gpupool-mem", "SIZE", "memory per gpupool slice instead of a fraction (e.g. 6GiB)", 1, 0, cb_memory},
    {"gpupool-class", "TAG", "only gpupool GPUs of this class tag or model name", 1, 0, cb_class},
    SPANK_OPTIONS_TABLE_END};

/* ---- Paths ------------------------------------------------------------------------------------------------- */

/* This plugin's directory, from the loader. */
static int plugin_directory(char *out, size_t size) {
  Dl_info info;
  char real[PATH_MAX];
  char *slash;
  if (dladdr((void *)&plugin_directory, &info) == 0 || info.dli_fname == NULL) return -1;
  if (realpath(info.dli_fname, real) == NULL) return -1;
  slash = strrchr(real, '/');
  if (slash == NULL) return -1;
  *slash = '\0';
  snprintf(out, size, "%s", real);
  return 0;
}

static int resolve_beside_plugin(const char *relative, char *out, size_t size) {
  char dir[PATH_MAX], joined[2 * PATH_MAX], real[PATH_MAX];
  if (plugin_directory(dir, sizeof(dir)) != 0) return -1;
  snprintf(joined, sizeof(joined), "%s/%s", dir, relative);
  if (realpath(joined, real) == NULL) return -1;
  snprintf(out, size, "%s", real);
  return 0;
}

static int find_gp_lease(char *out, size_t size) {
  if (arg_gp_lease != NULL) {
    snprintf(out, size, "%s", arg_gp_lease);
    return access(out, X_OK);
  }
  if (resolve_beside_plugin(GPUPOOL_SPANK_GP_LEASE_REL, out, size) == 0 && access(out, X_OK) == 0) return 0;
  if (resolve_beside_plugin(GPUPOOL_SPANK_GP_LEASE_BUILD_REL, out, size) == 0 && access(out, X_OK) == 0) return 0;
  return -1;
}

static int find_libdir(char *out, size_t size) {
  char library[PATH_MAX + 32];
  if (arg_libdir != NULL) {
    snprintf(out, size, "%s", arg_libdir);
  } else if (resolve_beside_plugin(GPUPOOL_SPANK_LIBDIR_REL, out, size) != 0) {
    return -1;
  }
  snprintf(library, sizeof(library), "%s/libcuda.so.1", out);
  return access(library, R_OK);
}

/* ---- Children ---------------------------------------------------------------------------------------------- */

/* In a child of a threaded process (slurmstepd), so no malloc: close_range where the kernel has it, else a loop. */
static void close_from(int lowest) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, (unsigned)lowest, ~0U, 0) == 0) return;
#endif
  long limit = sysconf(_SC_OPEN_MAX);
  if (limit < 0 || limit > 65536) limit = 65536;
  for (int fd = lowest; fd < limit; ++fd) close(fd);
}

/* In a child: become the job's user for good (slurmstepd is root, or root with the user's effective ids). */
static int become_user(uid_t uid, gid_t gid) {
  if (getuid() == uid && geteuid() == uid) return 0;
  if (geteuid() == 0 && setgroups(1, &gid) != 0) return -1;
  if (setresgid(gid, gid, gid) != 0) return -1;
  if (setresuid(uid, uid, uid) != 0) return -1;
  return 0;
}

/* An environment: `base` (may be NULL) with `extra` ("K=V") set over it. */
static char **make_environment(char **base, char **extra, int extra_count) {
  int n = 0, i, j, k = 0;
  char **env;
  while (base != NULL && base[n] != NULL) ++n;
  env = calloc((size_t)(n + extra_count + 1), sizeof(char *));
  if (env == NULL) return NULL;
  for (i = 0; i < n; ++i) {
    int replaced = 0;
    for (j = 0; j < extra_count; ++j) {
      size_t key = strcspn(extra[j], "=") + 1;
      if (strncmp(base[i], extra[j], key) == 0) replaced = 1;
    }
    if (!replaced) env[k++] = base[i];
  }
  for (j = 0; j < extra_count; ++j) env[k++] = extra[j];
  env[k] = NULL;
  return env;
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Waits for `pid` up to `seconds`; returns its wait status, -1 if it is still running, -2 if it is no child of ours
   any more (slurmstepd reaps any child that ends while it waits for its tasks). */
static int wait_for(pid_t pid, double seconds) {
  double deadline = now_seconds() + seconds;
  int status;
  for (;;) {
    pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid) return status;
    if (got < 0 && errno != EINTR) return -2;
    if (now_seconds() >= deadline) return -1;
    usleep(20000);
  }
}

static void append(char *buffer, size_t size, const char *data, size_t length) {
  size_t used = strlen(buffer);
  if (used + 1 >= size) return;
  if (length > size - used - 1) length = size - used - 1;
  memcpy(buffer + used, data, length);
  buffer[used + length] = '\0';
}

/* Starts `gp-lease hold` as the job's user; fills the token or the failure message. 0 on success. */
static int start_holder(spank_t sp) {
  char gp_lease[PATH_MAX], libdir[PATH_MAX], fraction[64], count_text[32], label[128], why[512];
  char stdout_text[MESSAGE_MAX] = "", stderr_text[MESSAGE_MAX] = "";
  char *argv[32], *extra[4], **job_env = NULL, **env;
  char servers_env[MESSAGE_MAX], pool_env[PATH_MAX + 16], probe[8];
  int argc = 0, extra_count = 0, in_pipe[2], out_pipe[2], err_pipe[2], status;
  long count;
  uint32_t job_id = 0, step_id = 0;
  uid_t uid;
  gid_t gid;
  pid_t pid;
  double deadline;

  if (check_options(why, sizeof(why)) != 0) {
    snprintf(failure, sizeof(failure), "%s", why);
    return -1;
  }
  if (opt_gpupool == NULL) {
    count = 1;
    fraction[0] = '\0';
  } else {
    parse_gpupool(opt_gpupool, &count, fraction, sizeof(fraction), why, sizeof(why));
  }
  if (find_gp_lease(gp_lease, sizeof(gp_lease)) != 0) {
    snprintf(failure, sizeof(failure),
             "gp-lease not found%s%s (give its path as gp_lease=PATH in plugstack.conf)",
             arg_gp_lease ? " at " : " beside the plugin", arg_gp_lease ? arg_gp_lease : "");
    return -1;
  }
  if (find_libdir(libdir, sizeof(libdir)) != 0) {
    snprintf(failure, sizeof(failure),
             "gpupool's libcuda.so.1 not found%s%s (give its directory as libdir=DIR in plugstack.conf)",
             arg_libdir ? " in " : " beside the plugin", arg_libdir ? arg_libdir : "");
    return -1;
  }
  spank_get_item(sp, S_JOB_ID, &job_id);
  spank_get_item(sp, S_JOB_STEPID, &step_id);
  if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS) {
    snprintf(failure, sizeof(failure), "cannot tell the job's user");
    return -1;
  }
  spank_get_item(sp, S_JOB_ENV, &job_env);

  snprintf(count_text, sizeof(count_text), "%ld", count);
  if (step_id == SLURM_BATCH_SCRIPT) {
    snprintf(label, sizeof(label), "slurm job %u batch", job_id);
  } else {
    snprintf(label, sizeof(label), "slurm job %u step %u", job_id, step_id);
  }
  argv[argc++] = gp_lease;
  argv[argc++] = "hold";
  argv[argc++] = "--watch-stdin";
  argv[argc++] = "--label";
  argv[argc++] = label;
  argv[argc++] = "-n";
  argv[argc++] = count_text;
  if (fraction[0] != '\0') {
    argv[argc++] = "-p";
    argv[argc++] = fraction;
  }
  if (opt_memory != NULL) {
    argv[argc++] = "-m";
    argv[argc++] = opt_memory;
  }
  if (opt_class != NULL && opt_class[0] != '\0') {
    argv[argc++] = "--class";
    argv[argc++] = opt_class;
  }
  if (arg_wait != NULL) {
    argv[argc++] = "--wait";
    argv[argc++] = arg_wait;
  }
  argv[argc] = NULL;

  /* The job's own pool wins; else the one plugstack.conf names; else gp-lease's pool file. */
  if (spank_getenv(sp, "GPUPOOL_SERVERS", probe, sizeof(probe)) == ESPANK_ENV_NOEXIST &&
      spank_getenv(sp, "GPUPOOL_POOL", probe, sizeof(probe)) == ESPANK_ENV_NOEXIST) {
    if (arg_servers != NULL) {
      snprintf(servers_env, sizeof(servers_env), "GPUPOOL_SERVERS=%s", arg_servers);
      extra[extra_count++] = servers_env;
    } else if (arg_pool != NULL) {
      snprintf(pool_env, sizeof(pool_env), "GPUPOOL_POOL=%s", arg_pool);
      extra[extra_count++] = pool_env;
    }
  }
  extra[extra_count++] = "GPUPOOL_LEASE=";  /* Never an enclosing lease's token. */
  env = make_environment(job_env, extra, extra_count);
  if (env == NULL) {
    snprintf(failure, sizeof(failure), "out of memory");
    return -1;
  }

  if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    snprintf(failure, sizeof(failure), "pipe: %s", strerror(errno));
    free(env);
    return -1;
  }
  pid = fork();
  if (pid < 0) {
    snprintf(failure, sizeof(failure), "fork: %s", strerror(errno));
    free(env);
    return -1;
  }
  if (pid == 0) {
    /* The holder must outlive no one: its own process group, away from the step's signals. */
    setpgid(0, 0);
    dup2(in_pipe[0], STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    close_from(3);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int s = 1; s < NSIG; ++s) signal(s, SIG_DFL);
    if (become_user(uid, gid) != 0) {
      static const char message[] = "gp-lease: cannot switch to the job's user\n";
      if (write(STDERR_FILENO, message, sizeof(message) - 1) < 0) _exit(2);
      _exit(2);
    }
    if (chdir("/") != 0) _exit(2);
    execve(gp_lease, argv, env);
    {
      static const char message[] = "gp-lease: cannot execute gp-lease (gp_lease= in plugstack.conf)\n";
      if (write(STDERR_FILENO, message, sizeof(message) - 1) < 0) _exit(2);
    }
    _exit(2);
  }
  free(env);
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_pipe[1]);

  /* The token comes on stdout, which gp-lease then closes; its stderr says why when it fails. */
  deadline = now_seconds() + 120;
  if (arg_wait != NULL) deadline += 24 * 3600;  /* gp-lease's own --wait bounds the queueing. */
  {
    int out_open = 1, err_open = 1;
    while (out_open && now_seconds() < deadline) {
      struct pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
      char chunk[1024];
      int n = poll(fds, err_open ? 2 : 1, 1000);
      if (n < 0 && errno != EINTR) break;
      if (n <= 0) continue;
      if (fds[0].revents) {
        ssize_t got = read(out_pipe[0], chunk, sizeof(chunk));
        if (got <= 0) out_open = 0;
        else append(stdout_text, sizeof(stdout_text), chunk, (size_t)got);
      }
      if (err_open && fds[1].revents) {
        ssize_t got = read(err_pipe[0], chunk, sizeof(chunk));
        if (got <= 0) err_open = 0;
        else append(stderr_text, sizeof(stderr_text), chunk, (size_t)got);
      }
    }
  }
  close(out_pipe[0]);
  stdout_text[strcspn(stdout_text, "\r\n")] = '\0';
  if (stdout_text[0] == '\0') {
    /* No token: gp-lease failed (or hangs). Its stderr is the reason. */
    int deadline_passed = now_seconds() >= deadline;
    if (deadline_passed) kill(pid, SIGKILL);
    status = wait_for(pid, 10);
    if (status == -1) {
      kill(pid, SIGKILL);
      wait_for(pid, 5);
    }
    {
      /* Whatever gp-lease still had to say. */
      char chunk[1024];
      ssize_t got;
      fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
      while ((got = read(err_pipe[0], chunk, sizeof(chunk))) > 0) append(stderr_text, sizeof(stderr_text), chunk, (size_t)got);
    }
    close(err_pipe[0]);
    close(in_pipe[1]);
    while (strlen(stderr_text) > 0 && (stderr_text[strlen(stderr_text) - 1] == '\n')) stderr_text[strlen(stderr_text) - 1] = '\0';
    for (char *c = stderr_text; *c; ++c) if (*c == '\n') *c = ' ';
    {
      const char *reason = stderr_text;
      if (strncmp(reason, "gp-lease: ", 10) == 0) reason += 10;
      snprintf(failure, sizeof(failure), "%s", deadline_passed ? "no answer from the pool in time" :
                                                  reason[0] ? reason : "gp-lease failed without a reason");
    }
    return -1;
  }
  close(err_pipe[0]);  /* gp-lease's later warnings go nowhere; it writes none that matter to the step. */
  holder_pid = pid;
  holder_stdin = in_pipe[1];
  lease_token = strdup(stdout_text);

  {
    char current[MESSAGE_MAX], path[2 * MESSAGE_MAX], job_text[32], request[512];
    if (spank_getenv(sp, "LD_LIBRARY_PATH", current, sizeof(current)) == ESPANK_SUCCESS && current[0] != '\0') {
      snprintf(path, sizeof(path), "%s:%s", libdir, current);
    } else {
      snprintf(path, sizeof(path), "%s", libdir);
    }
    snprintf(job_text, sizeof(job_text), "%u", job_id);
    spank_setenv(sp, "GPUPOOL_LEASE", lease_token, 1);
    spank_setenv(sp, "LD_LIBRARY_PATH", path, 1);
    spank_setenv(sp, "GPUPOOL_SLURM_JOB", job_text, 1);
    request_text(request, sizeof(request));
    spank_setenv(sp, "GPUPOOL_SLURM_REQUEST", request, 1);
  }
  return 0;
}

/* Runs `gp-lease release -` with the token on its stdin, as the job's user. */
static int release_by_token(const char *token, uid_t uid, gid_t gid) {
  char gp_lease[PATH_MAX];
  char *argv[] = {gp_lease, "release", "-", NULL};
  char *env[] = {"PATH=/usr/local/bin:/usr/bin:/bin", NULL};
  int in_pipe[2], status;
  pid_t pid;
  if (find_gp_lease(gp_lease, sizeof(gp_lease)) != 0) return -1;
  if (pipe2(in_pipe, O_CLOEXEC) != 0) return -1;
  pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    dup2(in_pipe[0], STDIN_FILENO);
    close_from(3);
    if (become_user(uid, gid) != 0) _exit(2);
    execve(gp_lease, argv, env);
    _exit(2);
  }
  close(in_pipe[0]);
  if (write(in_pipe[1], token, strlen(token)) < 0 || write(in_pipe[1], "\n", 1) < 0) {
    /* gp-lease died at once: its status says so. */
  }
  close(in_pipe[1]);
  status = wait_for(pid, 30);
  if (status == -1) {
    kill(pid, SIGKILL);
    wait_for(pid, 5);
    return -1;
  }
  if (status == -2) return 0; /* Reaped elsewhere: its outcome is unknown, and gp-lease release is idempotent. */
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* ---- SPANK callbacks --------------------------------------------------------------------------------------- */

int slurm_spank_init(spank_t sp, int ac, char **av) {
  /* plugstack.conf's arguments: NAME=VALUE, each kept in its variable (the last one given wins). */
  static const struct {
    const char *prefix;
    char **value;
  } known[] = {{"servers=", &arg_servers}, {"pool=", &arg_pool}, {"gp_lease=", &arg_gp_lease},
               {"libdir=", &arg_libdir},   {"wait=", &arg_wait}};
  for (int i = 0; i < ac; ++i) {
    const char *a = av[i];
    size_t k = 0;
    while (k < sizeof(known) / sizeof(known[0]) && strncmp(a, known[k].prefix, strlen(known[k].prefix)) != 0) ++k;
    if (k == sizeof(known) / sizeof(known[0])) {
      slurm_error("gpupool: unknown plugstack.conf argument '%s' (known: servers=, pool=, gp_lease=, libdir=, wait=)",
                  a);
      return -1;
    }
    free(*known[k].value);
    *known[k].value = xstrdup_or_null(a + strlen(known[k].prefix));
  }
  for (struct spank_option *o = options; o->name != NULL; ++o) {
    if (spank_option_register(sp, o) != ESPANK_SUCCESS) {
      slurm_error("gpupool: cannot register option --%s", o->name);
      return -1;
    }
  }
  return 0;
}

/* srun, sbatch, salloc: options that contradict each other stop the command before it asks for anything. */
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av) {
  char why[512];
  if (!opt_active || spank_remote(sp)) return 0;
  if (check_options(why, sizeof(why)) != 0) {
    slurm_error("gpupool: %s", why);
    return -1;
  }
  return 0;
}

/* slurmstepd, once per step and node, as the job's user, before any task starts. */
int slurm_spank_user_init(spank_t sp, int ac, char **av) {
  char enclosing_job[32], enclosing_request[512], request[512], token[MESSAGE_MAX];
  uint32_t job_id = 0, step_id = 0;
  if (!opt_active || !spank_remote(sp)) return 0;
  spank_get_item(sp, S_JOB_ID, &job_id);
  spank_get_item(sp, S_JOB_STEPID, &step_id);
  /* A step inside `sbatch --gpupool` inherits the job's options and its batch step's lease: asked in the same words,
     it shares that lease rather than asking for a second one. */
  if (spank_getenv(sp, "GPUPOOL_SLURM_JOB", enclosing_job, sizeof(enclosing_job)) == ESPANK_SUCCESS &&
      strtoul(enclosing_job, NULL, 10) == job_id &&
      spank_getenv(sp, "GPUPOOL_SLURM_REQUEST", enclosing_request, sizeof(enclosing_request)) == ESPANK_SUCCESS &&
      (request_text(request, sizeof(request)), strcmp(request, enclosing_request) == 0) &&
      spank_getenv(sp, "GPUPOOL_LEASE", token, sizeof(token)) == ESPANK_SUCCESS && token[0] != '\0') {
    slurm_verbose("gpupool: job %u step %u uses the job's lease", job_id, step_id);
    return 0;
  }
  if (start_holder(sp) != 0) {
    /* Said to the user by every task (task_init writes on its stderr); here for slurmd's log. */
    slurm_info("gpupool: job %u step %u: no GPU slices: %s", job_id, step_id, failure);
    return 0;
  }
  slurm_verbose("gpupool: job %u step %u holds a lease (gp-lease pid %d)", job_id, step_id, (int)holder_pid);
  return 0;
}

/* In each task, just before exec: a step that asked for slices and has none does not run. Its stderr is the
   user's (srun's terminal, the batch output file), so the reason reaches whoever started it. */
int slurm_spank_task_init(spank_t sp, int ac, char **av) {
  if (!opt_active || failure[0] == '\0') return 0;
  slurm_error("gpupool: the pool cannot give this step its GPU slices: %s", failure);
  return -1;
}

/* slurmstepd, when the step ends however it ends (also cancelled, timed out, tasks that failed to start). */
int slurm_spank_exit(spank_t sp, int ac, char **av) {
  uid_t uid = 0;
  gid_t gid = 0;
  int status;
  if (!spank_remote(sp) || holder_pid <= 0) return 0;
  spank_get_item(sp, S_JOB_UID, &uid);
  spank_get_item(sp, S_JOB_GID, &gid);
  /* gp-lease releases when its stdin closes. */
  close(holder_stdin);
  holder_stdin = -1;
  status = wait_for(holder_pid, 30);
  if (status == -1) {
    kill(holder_pid, SIGKILL);
    wait_for(holder_pid, 5);
  }
  if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    /* gp-lease was killed (proctrack kills what slurmstepd started when the tasks end, before this callback), was
       reaped by slurmstepd, or could not release: release by the token (a lease already gone counts as released). */
    if (release_by_token(lease_token, uid, gid) != 0) {
      slurm_error("gpupool: the step's lease could not be released; the agents free it when its TTL passes");
    }
  }
  holder_pid = -1;
  free(lease_token);
  lease_token = NULL;
  return 0;
}
