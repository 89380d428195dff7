/*
 * fastgate-launcher: the parent of one command, and the reaper of every process it starts.
 *
 *     fastgate-launcher [--plan FD] GRACE_MS CONTROL_FD REPORT_FD EXECUTABLE ARG0 [ARG...]
 *     fastgate-launcher --serve SOCKET_FD
 *
 * The second form is the resident (see serve() below and _resident.py): one per server, it
 * forks the first form's launcher for each command the server asks for.
 *
 * The first form is the same program as _launcher.py (which states the protocol and the plan's
 * steps); this one starts in about a millisecond where the Python one needs an interpreter.
 * It makes itself a child subreaper, so every process the command starts stays its
 * descendant however it detaches (setsid, double fork, nohup ... &): an orphan is re-parented
 * here, never to init.
 * When the command exits, or the parent asks (a line "T <grace_ms>" on CONTROL_FD, or the end
 * of that pipe: the parent is gone), every descendant gets SIGTERM, then SIGKILL after the
 * grace, and is reaped before this process exits. Descendants are found through each
 * process's parent in /proc/<pid>/stat.
 *
 * With a plan (the command sandbox, computed by fastgate.sandbox): its steps are system calls
 * only, made here in order: by the launcher before and after it enters new namespaces, by the
 * first process of a new pid namespace (which then ends every process of the namespace, its
 * init), and by the command itself before its exec (Landlock, seccomp, capabilities, limits).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <ftw.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GIVE_UP_MS 2000 /* after the first SIGKILL: how long the killed may take to die */
#define RESCAN_MS 10    /* while killing: how often to look for processes forked meanwhile */
#define LONGEST_WAIT_MS 60000 /* one poll at most (a long grace is waited in several) */
#define WATCH_MS 100          /* how often the bounds (processes, temporary bytes) are read */

/* System calls newer than some C libraries' headers: the same numbers on every architecture. */
#define NR_MOUNT_SETATTR 442
#define NR_LANDLOCK_CREATE_RULESET 444
#define NR_LANDLOCK_ADD_RULE 445
#define NR_LANDLOCK_RESTRICT_SELF 446
#define AT_RECURSIVE_ 0x8000
#define MOUNT_ATTR_RDONLY_ 0x1
#define MOUNT_ATTR_NOSUID_ 0x2
#define MOUNT_ATTR_NODEV_ 0x4
#define LANDLOCK_RULE_PATH_BENEATH_ 1
#define LANDLOCK_RULE_NET_PORT_ 2
/* Rights that apply to a file (not a directory) in a path-beneath rule: EXECUTE, WRITE_FILE,
 * READ_FILE, TRUNCATE, IOCTL_DEV. */
#define LANDLOCK_FILE_RIGHTS ((1ULL << 0) | (1ULL << 1) | (1ULL << 2) | (1ULL << 14) | (1ULL << 15))

/* The plan's steps (see _launcher.py for what each does). */
enum {
    OP_LOCK = 1,
    OP_PLACEHOLDER = 2,
    OP_REMOVE_AFTER = 3,
    OP_UNSHARE = 4,
    OP_WATCH_TASKS = 5,
    OP_WATCH_TREE = 6,
    OP_PRIVATE = 10,
    OP_HOLD = 11,
    OP_SEAL = 12,
    OP_TMPFS = 13,
    OP_ATTACH = 14,
    OP_BIND = 15,
    OP_MASK = 16,
    OP_PROC = 20,
    OP_LOOPBACK = 21,
    OP_LISTEN = 22,
    OP_WATCH = 23,
    OP_CHDIR = 30,
    OP_RLIMIT = 31,
    OP_NPROC_ABOVE = 32,
    OP_LANDLOCK = 33,
    OP_LANDLOCK_PATH = 34,
    OP_LANDLOCK_PORT = 35,
    OP_RESTRICT = 36,
    OP_CAPS = 37,
    OP_SECCOMP = 38,
};
enum { BIND_RECURSIVE = 1, BIND_READONLY = 2, BIND_OPTIONAL = 4, BIND_DEVICES = 8 };

#define MAX_ARGS 6
typedef struct {
    uint32_t op, argc;
    char *arg[MAX_ARGS];
    uint32_t len[MAX_ARGS];
} step_t;

static step_t *steps;
static size_t step_count;
static int report_fd = -1;
static pid_t launcher_parent; /* who started this launcher: the resident, or the server */
static int gone_fd = -1; /* the init's: written when every process of the namespace is gone */

typedef struct {
    int fd;
    const char *name;
    char kind;
} placeholder_t;

#define COMMONDIR_TEXT ".\n"
#define COMMONDIR_MODE 0444

/* What the plan set up that outlives its step. */
static struct {
    int locks[64];
    size_t lock_count;
    placeholder_t placeholders[64];
    size_t placeholder_count;
    const char *remove_after[8];
    size_t remove_count;
    int holds[64];
    size_t hold_count;
    int namespaces; /* CLONE_NEW* flags: the command's init is the first process of them */
    long long watch_tasks;     /* > 0: the bound on processes (and threads) alive at once */
    const char *watch_tree;    /* a directory whose bytes are bounded by watch_tree_bytes */
    long long watch_tree_bytes;
    const char *watch_statfs; /* a file system that is full when its bound is reached */
    int ruleset;
    int mask_file_made, mask_dir_made;
} plan = {.ruleset = -1};

static void report(char kind, long value) {
    char line[32];
    int n = snprintf(line, sizeof line, "%c %ld\n", kind, value);
    if (write(report_fd, line, (size_t)n) < 0) {
        /* the parent is gone (SIGPIPE is ignored): ending everything goes on */
    }
}

static void report_text(const char *line) {
    if (write(report_fd, line, strlen(line)) < 0) {
        /* as above */
    }
}

static long long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Benchmark builds only (benchmarks/command_timeline.py compiles them with
 * -DFASTGATE_STAGE_MARKS='"FILE"'): each stage of a command appends a line "pid seconds label"
 * (CLOCK_MONOTONIC, the server's time.monotonic) to FILE. The descriptor is opened once, by the
 * first process that marks, and inherited: a sandbox's own /tmp does not hide it. */
#ifdef FASTGATE_STAGE_MARKS
static int stage_fd = -1;
static void stage(const char *label) {
    if (stage_fd < 0) {
        stage_fd = open(FASTGATE_STAGE_MARKS, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    }
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    char line[96];
    int n = snprintf(line, sizeof line, "%d %lld.%09ld %s\n", (int)getpid(), (long long)t.tv_sec,
                     t.tv_nsec, label);
    if (write(stage_fd, line, (size_t)n) < 0) {
        /* a lost mark only makes the timeline shorter */
    }
}
#define STAGE(label) stage(label)
#else
#define STAGE(label) ((void)0)
#endif

/* -- the plan ------------------------------------------------------------------------------ */

static int read_plan(int fd) {
    size_t size = 0, cap = 1 << 16;
    char *data = malloc(cap);
    if (!data) return -1;
    for (;;) {
        if (size == cap) {
            char *grown = realloc(data, cap *= 2);
            if (!grown) return -1;
            data = grown;
        }
        ssize_t n = read(fd, data + size, cap - size);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        if (n == 0) break;
        size += (size_t)n;
    }
    close(fd);
    if (size < 4 || memcmp(data, "FGP1", 4) != 0) {
        errno = EINVAL;
        return -1;
    }
    size_t at = 4, cap_steps = 64;
    steps = calloc(cap_steps, sizeof *steps);
    if (!steps) return -1;
    while (at < size) {
        if (size - at < 8) goto bad;
        if (step_count == cap_steps) {
            step_t *grown = realloc(steps, (cap_steps *= 2) * sizeof *steps);
            if (!grown) return -1;
            steps = grown;
        }
        step_t *step = &steps[step_count++];
        memset(step, 0, sizeof *step);
        memcpy(&step->op, data + at, 4);
        memcpy(&step->argc, data + at + 4, 4);
        at += 8;
        if (step->argc > MAX_ARGS) goto bad;
        for (uint32_t i = 0; i < step->argc; i++) {
            uint32_t len;
            if (size - at < 4) goto bad;
            memcpy(&len, data + at, 4);
            at += 4;
            if (size - at < (size_t)len + 1 || data[at + len] != '\0') goto bad;
            step->arg[i] = data + at;
            step->len[i] = len;
            at += (size_t)len + 1;
        }
    }
    return 0;
bad:
    errno = EINVAL;
    return -1;
}

static long long num(const step_t *step, uint32_t i) {
    return i < step->argc ? strtoll(step->arg[i], NULL, 0) : 0;
}

static const char *text(const step_t *step, uint32_t i) {
    return i < step->argc ? step->arg[i] : "";
}

/* -- helpers ------------------------------------------------------------------------------ */

static int write_file(const char *path, const char *content) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = write(fd, content, strlen(content));
    int error = errno;
    close(fd);
    errno = error;
    return n == (ssize_t)strlen(content) ? 0 : -1;
}

struct mount_attr_ {
    uint64_t attr_set, attr_clr, propagation, userns_fd;
};

static int set_mount_attr(int dirfd, const char *path, unsigned flags, uint64_t set, uint64_t clr) {
    struct mount_attr_ attr = {set, clr, 0, 0};
    return (int)syscall(NR_MOUNT_SETATTR, dirfd, path, flags, &attr, sizeof attr);
}

static int make_dirs(const char *path) {
    char buffer[4096];
    size_t len = strlen(path);
    if (len >= sizeof buffer) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buffer, path, len + 1);
    for (char *slash = buffer + 1; *slash; slash++) {
        if (*slash != '/') continue;
        *slash = '\0';
        if (mkdir(buffer, 0755) != 0 && errno != EEXIST) return -1;
        *slash = '/';
    }
    return mkdir(buffer, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st, (void)ftw;
    if (type == FTW_DP) rmdir(path);
    else unlink(path);
    return 0;
}

/* The bytes of everything beneath `path` (bounded: it stops counting past `limit`). */
static long long tree_bytes;
static long long tree_limit;
/* Each entry counts at least ENTRY_BYTES, as a private tmpfs allows one inode per 4 KiB of its
 * size: a million empty files fill the directory as surely as a gigabyte does. */
#define ENTRY_BYTES 4096LL
static int add_bytes(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)path, (void)type, (void)ftw;
    long long bytes = (long long)st->st_blocks * 512;
    tree_bytes += bytes > ENTRY_BYTES ? bytes : ENTRY_BYTES;
    return tree_bytes > tree_limit;
}

static int drop_capabilities(void) {
    for (int cap = 0; cap < 64; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
            if (errno == EINVAL) break; /* past the last capability this kernel knows */
            if (errno != EPERM) return -1;
        }
    }
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    struct {
        uint32_t version;
        int pid;
    } header = {0x20080522, 0};
    uint32_t data[6] = {0};
    if (syscall(SYS_capset, &header, data) != 0) return -1;
    if (syscall(SYS_capget, &header, data) != 0) return -1;
    for (int i = 0; i < 6; i++) {
        if (data[i]) {
            errno = EPERM;
            return -1;
        }
    }
    return 0;
}

/* Processes and threads of this user, as /proc shows them. */
static long long tasks_of(uid_t uid) {
    long long count = 0;
    DIR *proc = opendir("/proc");
    if (!proc) return -1;
    struct dirent *entry;
    char path[300];
    while ((entry = readdir(proc))) {
        if (entry->d_name[0] < '1' || entry->d_name[0] > '9') continue;
        snprintf(path, sizeof path, "/proc/%s/status", entry->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        char status[2048];
        ssize_t n = read(fd, status, sizeof status - 1);
        close(fd);
        if (n <= 0) continue;
        status[n] = '\0';
        char *uid_line = strstr(status, "\nUid:");
        char *threads = strstr(status, "\nThreads:");
        long real = -1, number = 1;
        if (uid_line) sscanf(uid_line + 5, "%ld", &real);
        if (threads) sscanf(threads + 9, "%ld", &number);
        if (real == (long)uid) count += number;
    }
    closedir(proc);
    return count;
}

/* Every process (and thread) of this pid namespace, as its own /proc shows them. */
static long long tasks_here(void) {
    long long count = 0;
    DIR *proc = opendir("/proc");
    if (!proc) return -1;
    struct dirent *entry;
    char path[300];
    while ((entry = readdir(proc))) {
        if (entry->d_name[0] < '1' || entry->d_name[0] > '9') continue;
        snprintf(path, sizeof path, "/proc/%s/task", entry->d_name);
        DIR *tasks = opendir(path);
        if (!tasks) continue;
        struct dirent *task;
        while ((task = readdir(tasks))) count += task->d_name[0] != '.';
        closedir(tasks);
    }
    closedir(proc);
    return count;
}

/* -- the steps ----------------------------------------------------------------------------- */

static int mask_source(char kind, char *path, size_t size) {
    /* An empty file or directory nobody may read (mode 0), in the private temporary file
     * system: bound over a hidden path, it reads as "permission denied". */
    int *made = kind == 'd' ? &plan.mask_dir_made : &plan.mask_file_made;
    snprintf(path, size, "/tmp/.fastgate-hidden-%s", kind == 'd' ? "dir" : "file");
    if (*made) return 0;
    if (kind == 'd') {
        if (mkdir(path, 0) != 0) return -1;
    } else {
        int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0);
        if (fd < 0) return -1;
        close(fd);
    }
    *made = 1;
    return 0;
}

static void remove_mask_sources(void) {
    if (plan.mask_file_made) unlink("/tmp/.fastgate-hidden-file");
    if (plan.mask_dir_made) rmdir("/tmp/.fastgate-hidden-dir");
}

static int bind_mount(const char *source, const char *target, long long flags) {
    unsigned long how = MS_BIND | (flags & BIND_RECURSIVE ? MS_REC : 0);
    if (mount(source, target, NULL, how, NULL) != 0) {
        return errno == ENOENT && (flags & BIND_OPTIONAL) ? 0 : -1;
    }
    uint64_t set = flags & BIND_READONLY ? MOUNT_ATTR_RDONLY_ : 0;
    uint64_t clr = flags & BIND_DEVICES ? MOUNT_ATTR_NODEV_ | MOUNT_ATTR_RDONLY_ : 0;
    if (!set && !clr) return 0;
    return set_mount_attr(AT_FDCWD, target, flags & BIND_RECURSIVE ? AT_RECURSIVE_ : 0, set, clr);
}

static int landlock_ruleset(const step_t *step) {
    uint64_t attr[3] = {(uint64_t)num(step, 0), (uint64_t)num(step, 1), (uint64_t)num(step, 2)};
    size_t size = attr[2] ? 24 : attr[1] ? 16 : 8;
    plan.ruleset = (int)syscall(NR_LANDLOCK_CREATE_RULESET, attr, size, 0);
    return plan.ruleset < 0 ? -1 : 0;
}

static int landlock_path(const step_t *step) {
    int fd = open(text(step, 1), O_PATH | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT || errno == ENOTDIR ? 0 : -1; /* not here: nothing */
    struct stat st;
    uint64_t access = (uint64_t)num(step, 0);
    if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode)) access &= LANDLOCK_FILE_RIGHTS;
    struct __attribute__((packed)) {
        uint64_t allowed_access;
        int32_t parent_fd;
    } rule = {access, fd};
    long done = access ? syscall(NR_LANDLOCK_ADD_RULE, plan.ruleset, LANDLOCK_RULE_PATH_BENEATH_,
                                 &rule, 0)
                       : 0;
    int error = errno;
    close(fd);
    errno = error;
    return done == 0 ? 0 : -1;
}

static int landlock_port(const step_t *step) {
    struct {
        uint64_t allowed_access, port;
    } rule = {(uint64_t)num(step, 0), (uint64_t)num(step, 1)};
    return (int)syscall(NR_LANDLOCK_ADD_RULE, plan.ruleset, LANDLOCK_RULE_NET_PORT_, &rule, 0);
}

/* Sends `size` bytes of `data` on `channel`, with descriptor `fd` attached (none if < 0). */
static ssize_t send_with_descriptor(int channel, const void *data, size_t size, int fd) {
    struct iovec iov = {(void *)data, size};
    union {
        char buffer[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr message = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        message.msg_control = control.buffer;
        message.msg_controllen = sizeof control.buffer;
        struct cmsghdr *header = CMSG_FIRSTHDR(&message);
        header->cmsg_level = SOL_SOCKET;
        header->cmsg_type = SCM_RIGHTS;
        header->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(header), &fd, sizeof fd);
    }
    return sendmsg(channel, &message, MSG_NOSIGNAL);
}

static int listen_for_proxy(const step_t *step) {
    int channel = (int)num(step, 1);
    int sock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0) return -1;
    int one = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)num(step, 0))};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(sock, (struct sockaddr *)&address, sizeof address) != 0 || listen(sock, 128) != 0) {
        close(sock);
        return -1;
    }
    char byte = 'L';
    ssize_t sent = send_with_descriptor(channel, &byte, 1, sock);
    int error = errno;
    close(sock);
    close(channel);
    errno = error;
    return sent == 1 ? 0 : -1;
}

static int loopback_up(void) {
    int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sock < 0) return -1;
    struct ifreq request;
    memset(&request, 0, sizeof request);
    strcpy(request.ifr_name, "lo");
    int done = ioctl(sock, SIOCGIFFLAGS, &request);
    if (done == 0) {
        request.ifr_flags |= IFF_UP;
        done = ioctl(sock, SIOCSIFFLAGS, &request);
    }
    int error = errno;
    close(sock);
    errno = error;
    return done;
}

/* In a command that shares the launcher's pid namespace: a seccomp filter refusing (EPERM)
 * every signal to its launcher and to the process that started the launcher (the resident, or
 * the server), by pid or process group, and a pidfd of either. The plan's own filter protects
 * the server; these two pids only the launcher knows. A launcher killed by its command would
 * leave whatever the command detached (setsid, a double fork) without a supervisor; a killed
 * resident would let those orphans go to init rather than to it (see serve()). */
#if defined(__x86_64__)
#define GUARD_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define GUARD_ARCH AUDIT_ARCH_AARCH64
#endif
static int guard_supervisors(void) {
#ifdef GUARD_ARCH
    static const long calls[] = {SYS_kill, SYS_tkill, SYS_tgkill, SYS_rt_sigqueueinfo,
                                 SYS_rt_tgsigqueueinfo, 434 /* pidfd_open */};
    enum { NCALLS = sizeof calls / sizeof *calls };
    pid_t launcher = getppid();
    uint32_t targets[4];
    size_t ntargets = 0;
    targets[ntargets++] = (uint32_t)launcher;
    targets[ntargets++] = (uint32_t)-launcher;
    if (launcher_parent > 1) {
        targets[ntargets++] = (uint32_t)launcher_parent;
        targets[ntargets++] = (uint32_t)-launcher_parent;
    }
    struct sock_filter prog[4 + NCALLS + 1 + 1 + 4 + 2];
    size_t n = 0;
    prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 4 /* arch */);
    prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, GUARD_ARCH, 1, 0);
    prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0x7FFF0000U /* allow */);
    prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0 /* nr */);
    for (size_t i = 0; i < NCALLS; i++) {
        /* to the argument's check, just past the other tests and the allow */
        prog[n] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)calls[i],
                                               (uint8_t)(NCALLS - i), 0);
        n++;
    }
    prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0x7FFF0000U);
    prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 16 /* args[0], low */);
    for (size_t i = 0; i < ntargets; i++) {
        prog[n] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, targets[i],
                                               (uint8_t)(ntargets - i), 0);
        n++;
    }
    prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0x7FFF0000U);
    prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0x00050000U | EPERM);
    struct sock_fprog fprog = {(unsigned short)n, prog};
    return prctl(PR_SET_SECCOMP, 2 /* SECCOMP_MODE_FILTER */, &fprog, 0, 0);
#else
    return 0; /* no seccomp filters are made for another architecture */
#endif
}

static int run_step(const step_t *step) {
    switch (step->op) {
    case OP_LOCK: {
        int fd = open(text(step, 0), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || plan.lock_count == 64) return -1;
        while (flock(fd, LOCK_SH) != 0) {
            if (errno != EINTR) return -1;
        }
        plan.locks[plan.lock_count++] = fd;
        return 0;
    }
    case OP_PLACEHOLDER: {
        long long lock = num(step, 1);
        if (lock < 0 || (size_t)lock >= plan.lock_count || plan.placeholder_count == 64) {
            errno = EINVAL;
            return -1;
        }
        int dirfd = plan.locks[lock];
        char kind = text(step, 0)[0];
        const char *name = text(step, 2);
        if (kind == 'd') {
            if (mkdirat(dirfd, name, 0) != 0 && errno != EEXIST) return -1;
        } else if (kind == 'c') {
            /* A git directory's absent commondir: one that names the directory itself, which
             * git reads as it reads none, and which nobody can replace while it is mounted. */
            int fd = openat(dirfd, name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW,
                            COMMONDIR_MODE);
            if (fd < 0 && errno != EEXIST) return -1;
            if (fd >= 0) {
                ssize_t written = write(fd, COMMONDIR_TEXT, sizeof COMMONDIR_TEXT - 1);
                if (fchmod(fd, COMMONDIR_MODE) != 0) written = -1; /* whatever the umask */
                int error = errno;
                close(fd);
                errno = error;
                if (written != (ssize_t)(sizeof COMMONDIR_TEXT - 1)) {
                    if (written >= 0) errno = EIO;
                    return -1;
                }
            }
        } else {
            int fd = openat(dirfd, name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0);
            if (fd < 0 && errno != EEXIST) return -1;
            if (fd >= 0) close(fd);
        }
        plan.placeholders[plan.placeholder_count++] = (placeholder_t){dirfd, name, kind};
        return 0;
    }
    case OP_REMOVE_AFTER:
        if (plan.remove_count < 8) plan.remove_after[plan.remove_count++] = text(step, 0);
        return 0;
    case OP_UNSHARE:
        /* Entered by the command's init (clone). It ends every process of its pid namespace
         * (kill(-1, ...)): without a pid namespace of its own that would be every process of
         * the user, so such a plan is refused. */
        plan.namespaces = (int)num(step, 0);
        if (!(plan.namespaces & CLONE_NEWPID)) {
            plan.namespaces = 0;
            errno = EINVAL;
            return -1;
        }
        return 0;
    case OP_WATCH_TASKS:
        plan.watch_tasks = num(step, 0);
        return 0;
    case OP_WATCH_TREE:
        plan.watch_tree = text(step, 0);
        plan.watch_tree_bytes = num(step, 1);
        return 0;
    case OP_PRIVATE:
        return mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
    case OP_HOLD: {
        /* The directory itself, to bind back once a mount (the private /tmp) hides it. */
        if (plan.hold_count == 64) {
            errno = EINVAL;
            return -1;
        }
        int fd = open(text(step, 0), O_PATH | O_DIRECTORY | O_CLOEXEC);
        plan.holds[plan.hold_count++] = fd;
        return fd < 0 && errno != ENOENT ? -1 : 0;
    }
    case OP_SEAL:
        return set_mount_attr(AT_FDCWD, text(step, 0), AT_RECURSIVE_,
                              MOUNT_ATTR_RDONLY_ | MOUNT_ATTR_NOSUID_ | MOUNT_ATTR_NODEV_, 0);
    case OP_TMPFS: {
        char options[128];
        snprintf(options, sizeof options, "size=%lld,nr_inodes=%lld,mode=%llo", num(step, 1),
                 num(step, 2), num(step, 3));
        return mount("tmpfs", text(step, 0), "tmpfs", MS_NOSUID | MS_NODEV, options);
    }
    case OP_ATTACH: {
        long long hold = num(step, 0);
        if (hold < 0 || (size_t)hold >= plan.hold_count) {
            errno = EINVAL;
            return -1;
        }
        int fd = plan.holds[hold];
        if (fd < 0) return 0; /* it did not exist */
        char source[64];
        snprintf(source, sizeof source, "/proc/self/fd/%d", fd);
        const char *target = text(step, 1);
        if (make_dirs(target) != 0) return -1;
        int done = mount(source, target, NULL, MS_BIND | MS_REC, NULL);
        if (done == 0 && !num(step, 2)) {
            done = set_mount_attr(AT_FDCWD, target, AT_RECURSIVE_, 0, MOUNT_ATTR_RDONLY_);
            if (done != 0) done = set_mount_attr(AT_FDCWD, target, 0, 0, MOUNT_ATTR_RDONLY_);
        }
        int error = errno;
        close(fd);
        plan.holds[hold] = -1;
        errno = error;
        return done;
    }
    case OP_BIND:
        return bind_mount(text(step, 0), text(step, 1), num(step, 2));
    case OP_MASK: {
        char source[64];
        char kind = text(step, 0)[0];
        struct stat st;
        if (stat(text(step, 1), &st) != 0) return errno == ENOENT || errno == ENOTDIR ? 0 : -1;
        if (S_ISDIR(st.st_mode) != (kind == 'd')) kind = S_ISDIR(st.st_mode) ? 'd' : 'f';
        if (mask_source(kind, source, sizeof source) != 0) return -1;
        return bind_mount(source, text(step, 1), BIND_READONLY | BIND_OPTIONAL);
    }
    case OP_PROC:
        return mount("proc", text(step, 0), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    case OP_LOOPBACK:
        return loopback_up();
    case OP_LISTEN:
        return listen_for_proxy(step);
    case OP_WATCH:
        plan.watch_tasks = num(step, 0);
        plan.watch_statfs = step->argc > 1 && step->len[1] ? text(step, 1) : NULL;
        return 0;
    case OP_CHDIR:
        return chdir(text(step, 0));
    case OP_RLIMIT: {
        struct rlimit limit = {(rlim_t)num(step, 1), (rlim_t)num(step, 2)};
        struct rlimit now;
        if (getrlimit((int)num(step, 0), &now) == 0 && now.rlim_max != RLIM_INFINITY) {
            if (limit.rlim_max > now.rlim_max) limit.rlim_max = now.rlim_max;
            if (limit.rlim_cur > limit.rlim_max) limit.rlim_cur = limit.rlim_max;
        }
        return setrlimit((int)num(step, 0), &limit);
    }
    case OP_NPROC_ABOVE: {
        uid_t uid = getuid();
        if (uid == 0) return 0; /* the kernel does not count root's processes */
        long long count = tasks_of(uid);
        if (count < 0) return -1;
        struct rlimit limit = {(rlim_t)(count + num(step, 0)), (rlim_t)(count + num(step, 0))};
        return setrlimit(RLIMIT_NPROC, &limit);
    }
    case OP_LANDLOCK:
        return landlock_ruleset(step);
    case OP_LANDLOCK_PATH:
        return landlock_path(step);
    case OP_LANDLOCK_PORT:
        return landlock_port(step);
    case OP_RESTRICT: {
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
        int done = (int)syscall(NR_LANDLOCK_RESTRICT_SELF, plan.ruleset, 0);
        close(plan.ruleset);
        plan.ruleset = -1;
        return done;
    }
    case OP_CAPS:
        return drop_capabilities();
    case OP_SECCOMP: {
        struct {
            unsigned short len;
            const void *filter;
        } program = {(unsigned short)(step->len[0] / 8), step->arg[0]};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
        if (!plan.namespaces && guard_supervisors() != 0) return -1;
        return prctl(PR_SET_SECCOMP, 2 /* SECCOMP_MODE_FILTER */, &program, 0, 0);
    }
    }
    errno = EINVAL;
    return -1;
}

/* Runs the steps whose operation is in [low, high); on a failure, -1 with *failed set to the
 * step's index (errno is the step's). */
static int run_steps(uint32_t low, uint32_t high, long *failed) {
    for (size_t i = 0; i < step_count; i++) {
        if (steps[i].op < low || steps[i].op >= high) continue;
        if (run_step(&steps[i]) != 0) {
            *failed = (long)i;
            return -1;
        }
    }
    return 0;
}

/* Still the commondir placeholder: a regular file of that mode holding exactly its text. */
static int is_commondir_placeholder(int dirfd, const char *name) {
    int fd = openat(dirfd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat st;
    char text[sizeof COMMONDIR_TEXT];
    int same = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
               (st.st_mode & 07777) == COMMONDIR_MODE &&
               st.st_size == (off_t)(sizeof COMMONDIR_TEXT - 1) &&
               read(fd, text, sizeof text) == (ssize_t)(sizeof COMMONDIR_TEXT - 1) &&
               memcmp(text, COMMONDIR_TEXT, sizeof COMMONDIR_TEXT - 1) == 0;
    close(fd);
    return same;
}

static void cleanup(void) {
    for (size_t i = 0; i < plan.placeholder_count; i++) {
        /* Only the last launcher holding the directory removes what was made for it, and only
         * while it is still a placeholder: empty, and nobody's (mode 0). */
        placeholder_t *p = &plan.placeholders[i];
        if (flock(p->fd, LOCK_EX | LOCK_NB) != 0) continue;
        struct stat st;
        if (fstatat(p->fd, p->name, &st, AT_SYMLINK_NOFOLLOW) == 0 && (st.st_mode & 07777) == 0) {
            if (p->kind == 'd' && S_ISDIR(st.st_mode)) unlinkat(p->fd, p->name, AT_REMOVEDIR);
            if (p->kind == 'f' && S_ISREG(st.st_mode) && st.st_size == 0) {
                unlinkat(p->fd, p->name, 0);
            }
        } else if (p->kind == 'c' && is_commondir_placeholder(p->fd, p->name)) {
            unlinkat(p->fd, p->name, 0);
        }
        flock(p->fd, LOCK_SH);
    }
    for (size_t i = 0; i < plan.remove_count; i++) {
        nftw(plan.remove_after[i], remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    }
}

/* -- supervision --------------------------------------------------------------------------- */

typedef struct {
    pid_t *items;
    size_t len, cap;
} pid_list;

static void push(pid_list *list, pid_t pid) {
    if (list->len == list->cap) {
        size_t cap = list->cap ? list->cap * 2 : 256;
        pid_t *grown = realloc(list->items, cap * sizeof *grown);
        if (!grown) return; /* out of memory: this one is found by the next search */
        list->items = grown;
        list->cap = cap;
    }
    list->items[list->len++] = pid;
}

/* The parent of /proc/<name>: after the last ')' of the stat line (the name before it may hold
 * spaces and parentheses), the state, then the parent's pid. */
static pid_t parent_of(const char *name) {
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%s/stat", name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, line, sizeof line - 1);
    close(fd);
    if (n <= 0) return -1;
    line[n] = '\0';
    char *end = strrchr(line, ')');
    char state;
    long parent;
    if (!end || sscanf(end + 1, " %c %ld", &state, &parent) != 2) return -1;
    return (pid_t)parent;
}

typedef struct {
    pid_t pid, parent;
} process_t;

/* Every live or unreaped descendant of this process, into `out`. */
static void descendants(pid_list *out) {
    process_t *seen = NULL;
    size_t len = 0, cap = 0;
    pid_t self = getpid(), highest = self;
    out->len = 0;
    DIR *proc = opendir("/proc");
    if (!proc) return;
    struct dirent *entry;
    while ((entry = readdir(proc))) {
        if (entry->d_name[0] < '1' || entry->d_name[0] > '9') continue;
        pid_t parent = parent_of(entry->d_name);
        if (parent < 0) continue; /* gone meanwhile */
        if (len == cap) {
            size_t grown_cap = cap ? cap * 2 : 512;
            process_t *grown = realloc(seen, grown_cap * sizeof *grown);
            if (!grown) break; /* out of memory: the rest is found by the next search */
            seen = grown;
            cap = grown_cap;
        }
        pid_t pid = (pid_t)atol(entry->d_name);
        seen[len++] = (process_t){pid, parent};
        if (pid > highest) highest = pid;
        if (parent > highest) highest = parent;
    }
    closedir(proc);
    /* A bit per pid: the set of this process and its descendants, grown a generation per
     * pass until a pass adds nobody. */
    uint8_t *ours = calloc((size_t)highest / 8 + 1, 1);
    if (ours) {
        ours[self / 8] |= (uint8_t)(1 << (self % 8));
        for (int grew = 1; grew;) {
            grew = 0;
            for (size_t i = 0; i < len; i++) {
                pid_t pid = seen[i].pid, parent = seen[i].parent;
                int known = ours[pid / 8] & (1 << (pid % 8));
                if (!known && (ours[parent / 8] & (1 << (parent % 8)))) {
                    ours[pid / 8] |= (uint8_t)(1 << (pid % 8));
                    push(out, pid);
                    grew = 1;
                }
            }
        }
        free(ours);
    }
    free(seen);
}

/* Sends `sig` to every descendant; returns how many were found, and in `refused` how many
 * this process may not signal (a set-user-id program, say). The command and its process group
 * are signalled by their pid too (while it is unreaped its pid cannot be reused): they are
 * reached even where /proc cannot be read. In a pid namespace of its own, the command's first
 * process (its init) is the only one signalled: it ends the rest, and the kernel kills them all
 * when it dies. */
static size_t signal_all(int sig, pid_t command, int command_done, size_t *refused) {
    static pid_list found;
    *refused = 0;
    if (plan.namespaces) {
        if (command_done) return 0;
        kill(command, sig);
        return 1;
    }
    if (!command_done) {
        kill(-command, sig);
        kill(command, sig);
    }
    descendants(&found);
    for (size_t i = 0; i < found.len; i++) {
        if (kill(found.items[i], sig) != 0 && errno == EPERM) (*refused)++;
        if (sig == SIGTERM) kill(found.items[i], SIGCONT); /* a stopped process gets it too */
    }
    return found.len;
}

/* Collects every exited child; reports the command's status (unless its init does). Returns 0
 * when no child is left (then no descendant is: every orphan below is re-parented here). */
static int reap(pid_t command, int *command_done) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (pid == command) {
            *command_done = 1;
            if (!plan.namespaces) {
                STAGE("launcher: command exited");
                report('X', WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status));
            }
        }
    }
    return !(pid < 0 && errno == ECHILD);
}

/* A bound reached ("processes" or "tmp"), or NULL. */
static const char *bound_reached(void) {
    if (plan.watch_tasks > 0) {
        if (plan.namespaces || plan.watch_statfs) {
            if (tasks_here() >= plan.watch_tasks) return "processes";
        } else {
            static pid_list found;
            descendants(&found);
            if ((long long)found.len > plan.watch_tasks) return "processes";
        }
    }
    if (plan.watch_statfs) {
        struct statfs fs;
        if (statfs(plan.watch_statfs, &fs) == 0 && (fs.f_bavail == 0 || fs.f_ffree == 0)) {
            return "tmp";
        }
    }
    if (plan.watch_tree) {
        tree_bytes = 0;
        tree_limit = plan.watch_tree_bytes;
        nftw(plan.watch_tree, add_bytes, 16, FTW_PHYS | FTW_MOUNT);
        if (tree_bytes > plan.watch_tree_bytes) return "tmp";
    }
    return NULL;
}

static int watching(void) {
    return plan.watch_tasks > 0 || plan.watch_statfs || plan.watch_tree;
}

/* Reports a bound reached, if any; whether one was. Also looked at when the command has exited
 * on its own: one that met a bound (a full temporary directory) may give up before the next
 * look would have found it. */
static int report_bound(void) {
    const char *bound = watching() ? bound_reached() : NULL;
    if (bound) {
        char line[32];
        snprintf(line, sizeof line, "B %s\n", bound);
        report_text(line);
    }
    return bound != NULL;
}

static void quiet_stdio(void) {
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd < 3; fd++) {
        if (null < 0 || dup2(null, fd) < 0) close(fd);
    }
    if (null > 2) close(null);
}

/* Tells the launcher about the start, on the socket it reads: 'h' (its credentials say the
 * command's pid as the launcher sees it), 'e' and an errno (the exec failed), or 'f', a step's
 * index and an errno (a step of the plan failed). */
static void tell(int channel, char kind, long a, long b) {
    struct {
        char kind;
        int32_t a, b;
    } __attribute__((packed)) message = {kind, (int32_t)a, (int32_t)b};
    if (send(channel, &message, kind == 'h' ? 1 : sizeof message, MSG_NOSIGNAL) < 0) {
        /* the launcher is gone: the death signal ends this process */
    }
}

/* ``tells_group``: this process was vforked, so its launcher resumes only after the exec and
 * would report the group too late to be sure of it (a command may kill its launcher at once);
 * it reports it here instead, as the group's leader, before the exec. */
static void become_command(int channel, const char *executable, char **argv,
                           const sigset_t *original, pid_t parent, int tells_group) {
    setsid();
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0); /* should its parent be killed */
    STAGE("command: running");
    if (getppid() != parent) _exit(127);
    if (tells_group) report('P', (long)syscall(SYS_getpid));
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, original, NULL);
    long failed;
    if (run_steps(30, 40, &failed) != 0) {
        tell(channel, 'f', failed, errno);
        _exit(127);
    }
    STAGE("command: confined, exec");
    tell(channel, 'h', 0, 0);
    if (strchr(executable, '/')) {
        execv(executable, argv);
    } else {
        execvp(executable, argv);
    }
    tell(channel, 'e', errno, 0);
    _exit(127);
}

/* Maps this process's user and group to themselves in its new user namespace. Its own /proc
 * files may be written only while it is dumpable: no command runs yet. */
static int map_self(uid_t uid, gid_t gid) {
    char map[64];
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    int done = write_file("/proc/self/setgroups", "deny");
    if (done != 0 && errno == ENOENT) done = 0;
    if (done == 0) {
        snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
        done = write_file("/proc/self/uid_map", map);
    }
    if (done == 0) {
        snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
        done = write_file("/proc/self/gid_map", map);
    }
    int error = errno;
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    errno = error;
    return done;
}

/* The first process of the command's namespaces (pid 1 of its pid namespace): it maps its
 * user, makes the command's file system (the plan's mount steps), starts the command, reaps
 * every orphan, and ends them all once the command has exited (TERM, then KILL after the
 * grace) or when a bound is reached; its death kills whatever is left in the namespace. */
static void be_init(int channel, int signals, long long grace, const char *executable,
                    char **argv, const sigset_t *original, uid_t uid, gid_t gid) {
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getpid() != 1) _exit(127); /* kill(-1, ...) below must reach this namespace only */
    STAGE("init: running");
    long failed = -1;
    for (size_t i = 0; i < step_count; i++) {
        if (steps[i].op == OP_UNSHARE) failed = (long)i;
    }
    if ((plan.namespaces & CLONE_NEWUSER) && map_self(uid, gid) != 0) {
        tell(channel, 'f', failed, errno);
        _exit(127);
    }
    STAGE("init: user mapped");
    if (run_steps(10, 30, &failed) != 0) {
        tell(channel, 'f', failed, errno);
        _exit(127);
    }
    remove_mask_sources();
    STAGE("init: mounts made");
    pid_t command = fork();
    if (command == 0) become_command(channel, executable, argv, original, 1, 0);
    if (command < 0) {
        tell(channel, 'e', errno, 0);
        _exit(127);
    }
    close(channel);
    quiet_stdio(); /* the command's output ends when the command's processes do */
    long long end_at = -1; /* >= 0: everything is killed then */
    int ending = 0;
    for (;;) {
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            if (pid == command) {
                STAGE("init: command exited");
                if (!ending) report_bound();
                report('X', WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status));
                if (!ending) {
                    ending = 1;
                    end_at = now_ms() + grace;
                    kill(-1, SIGTERM);
                    kill(-1, SIGCONT);
                }
            }
        }
        if (pid < 0 && errno == ECHILD) {
            STAGE("init: every process gone");
            /* Every process is gone: the launcher may clean up and exit while the kernel tears
             * the namespaces down (which takes milliseconds, more on a busy machine). */
            if (write(gone_fd, "Z", 1) < 0) _exit(0);
            _exit(0);
        }
        long long now = now_ms();
        if (end_at >= 0 && now >= end_at) {
            kill(-1, SIGKILL);
            end_at = -1;
        }
        if (!ending && watching() && report_bound()) {
            ending = 1;
            kill(-1, SIGKILL);
        }
        long long wait = end_at >= 0 ? end_at - now : -1;
        if (!ending && watching()) wait = WATCH_MS;
        if (ending && end_at < 0) wait = RESCAN_MS * 10; /* killed: until the last is reaped */
        struct pollfd watched = {signals, POLLIN, 0};
        if (poll(&watched, 1, wait > LONGEST_WAIT_MS ? LONGEST_WAIT_MS : (int)wait) < 0 &&
            errno != EINTR) {
            _exit(1);
        }
        struct signalfd_siginfo info;
        while (read(signals, &info, sizeof info) == (ssize_t)sizeof info) {
            if (info.ssi_signo != SIGCHLD && !ending) {
                ending = 1; /* the launcher asks: it kills this process after its grace */
                kill(-1, SIGTERM);
                kill(-1, SIGCONT);
            }
        }
    }
}

/* Reads the start messages until the channel closes (the exec succeeded, or every holder of
 * the other end is gone); returns the command's pid (0 when unknown), or -1 after reporting
 * why it did not start. */
static pid_t await_start(int channel, pid_t child) {
    pid_t pid = 0;
    for (;;) {
        struct {
            char kind;
            int32_t a, b;
        } __attribute__((packed)) message;
        union {
            char buffer[CMSG_SPACE(sizeof(struct ucred))];
            struct cmsghdr align;
        } control;
        struct iovec iov = {&message, sizeof message};
        struct msghdr header = {.msg_iov = &iov, .msg_iovlen = 1};
        header.msg_control = control.buffer;
        header.msg_controllen = sizeof control.buffer;
        ssize_t n = recvmsg(channel, &header, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (message.kind == 'h') {
            for (struct cmsghdr *c = CMSG_FIRSTHDR(&header); c; c = CMSG_NXTHDR(&header, c)) {
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
                    struct ucred creds;
                    memcpy(&creds, CMSG_DATA(c), sizeof creds);
                    pid = creds.pid;
                }
            }
            if (!pid) pid = child;
        } else if (n == (ssize_t)sizeof message) {
            waitpid(child, NULL, 0);
            if (message.kind == 'f') {
                char line[48];
                snprintf(line, sizeof line, "F %d %d\n", message.a, message.b);
                report_text(line);
            } else {
                report('E', message.a);
            }
            return -1;
        }
    }
    close(channel);
    return pid;
}

static int run_launcher(int argc, char **argv) {
    int plan_fd = -1;
    if (argc > 2 && strcmp(argv[1], "--plan") == 0) {
        plan_fd = atoi(argv[2]);
        argv += 2;
        argc -= 2;
    }
    if (argc < 6) {
        fprintf(stderr,
                "usage: %s [--plan FD] GRACE_MS CONTROL_FD REPORT_FD EXECUTABLE ARG0 [ARG...]\n",
                argv[0]);
        return 125;
    }
    long long grace = atoll(argv[1]);
    launcher_parent = getppid();
    int control_fd = atoi(argv[2]);
    report_fd = atoi(argv[3]);
    const char *executable = argv[4];
    STAGE("launcher: running");
    /* Neither descriptor is the command's: it must not read the parent's requests. */
    fcntl(control_fd, F_SETFD, FD_CLOEXEC);
    fcntl(report_fd, F_SETFD, FD_CLOEXEC);
    signal(SIGPIPE, SIG_IGN);
    /* Not dumpable: a process of the same user (the command included) may not ptrace this one
     * or open its /proc files (environ, mem, fd: its pipes to the parent). The command, once
     * exec'd, is dumpable again. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
        report('E', errno);
        return 0;
    }
    long failed;
    if (plan_fd >= 0) {
        fcntl(plan_fd, F_SETFD, FD_CLOEXEC);
        if (read_plan(plan_fd) != 0) {
            report('E', errno);
            return 0;
        }
        for (size_t i = 0; i < step_count; i++) {
            if (steps[i].op == OP_LISTEN) fcntl((int)num(&steps[i], 1), F_SETFD, FD_CLOEXEC);
        }
        if (run_steps(1, 10, &failed) != 0) {
            char line[48];
            snprintf(line, sizeof line, "F %ld %d\n", failed, errno);
            report_text(line);
            cleanup();
            return 0;
        }
    }
    sigset_t handled, original;
    sigemptyset(&handled);
    int stops[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof stops / sizeof *stops; i++) sigaddset(&handled, stops[i]);
    sigprocmask(SIG_BLOCK, &handled, &original);
    int signals = signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
    int started[2];
    if (signals < 0 || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, started) != 0) {
        report('E', errno);
        cleanup();
        return 0;
    }
    int one = 1;
    setsockopt(started[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
    pid_t self = getpid();
    uid_t uid = getuid();
    gid_t gid = getgid();
    int gone[2] = {-1, -1};
    if (plan.namespaces && pipe2(gone, O_CLOEXEC) != 0) {
        report('E', errno);
        cleanup();
        return 0;
    }
    if (uid == 0 && plan.namespaces) setgroups(0, NULL); /* no supplementary group goes along */
    STAGE("launcher: its steps made");
    /* With namespaces, the child is the first process of them all (clone, as fork does,
     * continues on a copy of this stack); this launcher stays outside them. Without a plan,
     * the command is vforked: it borrows this process's memory until its exec (it only makes
     * system calls, then execs or exits), which spares the copy a fork makes. A plan's steps
     * keep state in this process's memory (the Landlock ruleset), so they get a fork. */
    int vforked = !plan.namespaces && step_count == 0;
    pid_t command = plan.namespaces ? (pid_t)syscall(SYS_clone,
                                                     (unsigned long)plan.namespaces | SIGCHLD,
                                                     0, 0, 0, 0)
                    : vforked       ? vfork()
                                    : fork();
    if (command == 0) {
        close(started[0]);
        if (plan.namespaces) {
            close(gone[0]);
            gone_fd = gone[1];
            be_init(started[1], signals, grace, executable, argv + 5, &original, uid, gid);
        }
        become_command(started[1], executable, argv + 5, &original, self, vforked);
    }
    if (command < 0) {
        report('E', errno);
        cleanup();
        return 0;
    }
    STAGE("launcher: first process made");
    /* Reported before the exec is (a vforked command reported itself): a command killing this
     * launcher at once still leaves the parent the group to end. */
    if (!vforked) report('P', command);
    close(started[1]);
    if (gone[1] >= 0) close(gone[1]);
    for (size_t i = 0; i < step_count; i++) {
        if (steps[i].op == OP_LISTEN) close((int)num(&steps[i], 1));
    }
    quiet_stdio(); /* the command's output ends when the command's processes do, not later */
    pid_t shown = await_start(started[0], command);
    if (shown < 0) {
        cleanup();
        return 0;
    }
    STAGE("launcher: the exec seen");
    report('S', shown ? shown : command);

    int command_done = 0, phase = 0; /* 0 running, 1 TERM sent, 2 KILL */
    long long kill_at = 0, give_up_at = 0, watch_at = now_ms() + WATCH_MS;
    size_t found = 0, refused = 0;
    /* The init's pipe comes first: polled with the signals, the control pipe may be closed. */
    struct pollfd watched[3] = {{signals, POLLIN, 0}, {gone[0], POLLIN, 0}, {control_fd, POLLIN, 0}};
    long long stop_grace = -1; /* >= 0: a stop was asked, with this grace */
    int watch_here = watching() && !plan.namespaces;
    int all_gone = 0;
    for (;;) {
        int was_done = command_done;
        int left = reap(command, &command_done);
        if (command_done && !was_done && watch_here && phase == 0) report_bound();
        if (!left) {
            all_gone = 1;
            break;
        }
        if (command_done && stop_grace < 0) stop_grace = plan.namespaces ? 0 : grace;
        long long now = now_ms();
        if (watch_here && phase == 0 && now >= watch_at) {
            if (report_bound()) stop_grace = 0;
            watch_at = now + WATCH_MS;
        }
        if (stop_grace >= 0 && phase == 0) {
            phase = 1;
            signal_all(SIGTERM, command, command_done, &refused);
            kill_at = now + stop_grace;
        } else if (stop_grace >= 0 && phase == 1 && now + stop_grace < kill_at) {
            kill_at = now + stop_grace; /* asked again, with a shorter grace */
        }
        if (phase == 1 && now >= kill_at) {
            phase = 2;
            give_up_at = now + GIVE_UP_MS;
        }
        if (phase == 2) {
            found = signal_all(SIGKILL, command, command_done, &refused);
            if ((found > 0 && found == refused) || now >= give_up_at) {
                report('L', (long)found);
                break; /* what is left cannot be ended from here */
            }
        }
        long long wait = phase == 0 ? -1 : phase == 1 ? kill_at - now : RESCAN_MS;
        if (watch_here && phase == 0) wait = watch_at > now ? watch_at - now : 0;
        int timeout = wait > LONGEST_WAIT_MS ? LONGEST_WAIT_MS : (int)wait;
        watched[2].fd = control_fd;
        if (poll(watched, 3, timeout) < 0 && errno != EINTR) break;
        if (watched[1].revents) {
            char byte;
            if (read(gone[0], &byte, 1) == 1) {
                all_gone = 1; /* the init is only exiting now: it is not waited for */
                break;
            }
            watched[1].fd = -1; /* closed without a word: the init died; reaped above */
        }
        if (watched[0].revents) {
            struct signalfd_siginfo info;
            while (read(signals, &info, sizeof info) == (ssize_t)sizeof info) {
                if (info.ssi_signo != SIGCHLD && stop_grace < 0) stop_grace = grace;
            }
        }
        if (control_fd >= 0 && watched[2].revents) {
            char line[32];
            ssize_t n = read(control_fd, line, sizeof line - 1);
            long long asked = grace;
            if (n > 1 && line[0] == 'T') {
                line[n] = '\0';
                asked = atoll(line + 1);
            } else if (n <= 0) {
                close(control_fd); /* the parent is gone, or has let go: end everything */
                control_fd = -1;
            }
            if (stop_grace < 0 || asked < stop_grace) stop_grace = asked;
        }
    }
    if (all_gone) {
        STAGE("launcher: every process gone");
        report('Z', 0); /* every process of the command has ended: then cleanup */
    }
    cleanup();
    STAGE("launcher: cleaned up");
    return 0;
}

/* -- the resident: one per server, forking a launcher per command ---------------------------- */

/* The request's slots, in the order its descriptors are sent (absent ones are skipped). */
enum { SLOT_SPEC, SLOT_CONTROL, SLOT_REPORT, SLOT_STDIN, SLOT_STDOUT, SLOT_STDERR, SLOT_CWD,
       SLOT_PLAN, SLOT_COUNT };
#define MAX_PASSED 64 /* descriptors the plan names, beyond the slots */

/* Reads the whole spec (a memfd the server wrote: NUL-terminated strings) into memory. */
static char *read_spec(int fd, size_t *size) {
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size <= 0) return NULL;
    char *data = malloc((size_t)st.st_size + 1);
    if (!data) return NULL;
    size_t done = 0;
    while (done < (size_t)st.st_size) {
        ssize_t n = pread(fd, data + done, (size_t)st.st_size - done, (off_t)done);
        if (n <= 0) {
            free(data);
            return NULL;
        }
        done += (size_t)n;
    }
    data[done] = '\0';
    *size = done;
    return data;
}

/* The spec's strings, in order, as an array (NULL-terminated); their count in `count`. */
static char **split_spec(char *data, size_t size, size_t *count) {
    size_t n = 0;
    for (size_t i = 0; i < size; i++) n += data[i] == '\0';
    char **items = calloc(n + 1, sizeof *items);
    if (!items) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < size && k < n; i += strlen(data + i) + 1) items[k++] = data + i;
    *count = k;
    return items;
}

/* A failure before the launcher runs: told as the command's start error. */
static int failed(void) {
    report('E', errno);
    return 0;
}

/* In the forked child: from the request's descriptors and spec to a launcher's argv, stdio,
 * directory and environment; then the launcher itself. Spec: GRACE_MS, EXECUTABLE, the
 * count of arguments and the arguments, the count of variables and the variables, then the
 * number each passed descriptor had in the server (the plan names them by it). */
static int become_launcher(int *slots, int *passed, size_t passed_count) {
    report_fd = slots[SLOT_REPORT]; /* a failure below is reported as the command's ('E') */
    size_t size, count;
    errno = EPROTO;
    char *data = read_spec(slots[SLOT_SPEC], &size);
    char **spec = data ? split_spec(data, size, &count) : NULL;
    size_t argc_ = spec && count >= 4 ? (size_t)atol(spec[2]) : 0;
    size_t envc = spec && 4 + argc_ < count ? (size_t)atol(spec[3 + argc_]) : 0;
    size_t env_at = 4 + argc_;
    if (!spec || count < 4 || argc_ == 0 || env_at + envc + passed_count > count) {
        report('E', errno);
        return 0;
    }
    /* Every received descriptor above every number it must take (0-2 and each passed one's),
     * then each to its place. The lowest such numbers: any fixed higher floor fails under a
     * low limit on open files (F_DUPFD refuses a floor at or above it). */
    int floor = 3;
    for (size_t i = 0; i < passed_count; i++) {
        int wanted = atoi(spec[env_at + envc + i]);
        if (wanted >= floor) floor = wanted + 1;
    }
    for (int i = 0; i < SLOT_COUNT; i++) {
        if (slots[i] < 0) continue;
        int moved = fcntl(slots[i], F_DUPFD_CLOEXEC, floor);
        if (moved < 0) return failed();
        close(slots[i]);
        slots[i] = moved;
        if (i == SLOT_REPORT) report_fd = moved;
    }
    for (size_t i = 0; i < passed_count; i++) {
        int moved = fcntl(passed[i], F_DUPFD_CLOEXEC, floor);
        if (moved < 0) return failed();
        close(passed[i]);
        passed[i] = moved;
    }
    for (int fd = 0; fd < 3; fd++) {
        int source = slots[SLOT_STDIN + fd];
        if (source < 0) {
            source = open("/dev/null", O_RDWR | O_CLOEXEC);
            if (source < 0) return failed();
        }
        if (dup2(source, fd) < 0) return failed();
    }
    for (int fd = 0; fd < 3; fd++) {
        if (slots[SLOT_STDIN + fd] >= 0) close(slots[SLOT_STDIN + fd]);
    }
    for (size_t i = 0; i < passed_count; i++) {
        int wanted = atoi(spec[env_at + envc + i]);
        if (dup2(passed[i], wanted) < 0) return failed(); /* open across the exec */
        close(passed[i]);
    }
    if (slots[SLOT_CWD] >= 0) {
        if (fchdir(slots[SLOT_CWD]) != 0) return failed();
        close(slots[SLOT_CWD]);
    }
    close(slots[SLOT_SPEC]);
    /* The command's environment: the exec uses it, and the search of the executable. */
    char **env = calloc(envc + 1, sizeof *env);
    if (!env) return failed();
    for (size_t i = 0; i < envc; i++) env[i] = spec[env_at + i];
    environ = env;
    char numbers[3][24];
    char *argv[8 + argc_ + 1];
    size_t k = 0;
    argv[k++] = "fastgate-launcher";
    if (slots[SLOT_PLAN] >= 0) {
        snprintf(numbers[0], sizeof numbers[0], "%d", slots[SLOT_PLAN]);
        argv[k++] = "--plan";
        argv[k++] = numbers[0];
    }
    snprintf(numbers[1], sizeof numbers[1], "%d", slots[SLOT_CONTROL]);
    snprintf(numbers[2], sizeof numbers[2], "%d", slots[SLOT_REPORT]);
    argv[k++] = spec[0];
    argv[k++] = numbers[1];
    argv[k++] = numbers[2];
    argv[k++] = spec[1];
    for (size_t i = 0; i < argc_; i++) argv[k++] = spec[3 + i];
    argv[k] = NULL;
    return run_launcher((int)k, argv);
}

/* One request as received: its descriptors, by slot and then the passed ones. */
typedef struct {
    int slots[SLOT_COUNT];
    int fds[SLOT_COUNT + MAX_PASSED];
    size_t fd_count, used; /* fds[used..fd_count): the descriptors the plan names */
    int error;             /* EPROTO: a malformed request */
} request_t;

/* Takes the next request off the socket: 1 (its `error` says whether it is well formed), 0
 * when interrupted, -1 when the server is gone. */
static int receive_request(int sock, request_t *request) {
    char header[8];
    struct iovec iov = {header, sizeof header};
    union {
        char buffer[CMSG_SPACE(sizeof(int) * (SLOT_COUNT + MAX_PASSED))];
        struct cmsghdr align;
    } control;
    struct msghdr message = {.msg_iov = &iov, .msg_iovlen = 1};
    message.msg_control = control.buffer;
    message.msg_controllen = sizeof control.buffer;
    ssize_t n = recvmsg(sock, &message, MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return 0;
    if (n <= 0) return -1;
    request->fd_count = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&message); c; c = CMSG_NXTHDR(&message, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k && request->fd_count < SLOT_COUNT + MAX_PASSED; i++) {
            memcpy(&request->fds[request->fd_count++], CMSG_DATA(c) + i * sizeof(int),
                   sizeof(int));
        }
    }
    /* header: 'R', then a bit per slot present (the first three always are). */
    uint32_t present = 0;
    memcpy(&present, header + 4, sizeof present);
    request->used = 0;
    request->error = (n == (ssize_t)sizeof header && header[0] == 'R') ? 0 : EPROTO;
    for (int i = 0; i < SLOT_COUNT; i++) {
        request->slots[i] = -1;
        if (!(present & (1u << i))) continue;
        if (request->used < request->fd_count) request->slots[i] = request->fds[request->used++];
        else request->error = EPROTO;
    }
    return 1;
}

static void drop_request(request_t *request) {
    for (size_t i = 0; i < request->fd_count; i++) close(request->fds[i]);
}

/* The reply to a request: the launcher's pid and a pidfd of it, or an errno. */
static int send_reply(int sock, pid_t pid, int error, int pidfd) {
    struct {
        int32_t pid, error;
    } reply = {pid, error};
    return send_with_descriptor(sock, &reply, sizeof reply, pidfd) < 0 ? -1 : 0;
}

/* A byte to the resident on `taken` (unless -1): the spare has taken its request. */
static void tell_taken(int taken) {
    if (taken < 0) return;
    if (write(taken, "T", 1) < 0) {
        /* the resident is gone: this request is still served */
    }
    close(taken);
}

/* In the process that is to be the request's launcher: it replies itself (its pid and a pidfd
 * of itself) before anything of the command starts, so a server that gets no reply knows that
 * nothing started; then it tells the resident (a spare: after the reply, so the server is not
 * kept waiting behind the resident's fork of the next one), lets go of the socket and becomes
 * the launcher. */
static int launch(int sock, request_t *request, int taken) {
    if (request->error) {
        send_reply(sock, 0, request->error, -1);
        tell_taken(taken);
        drop_request(request);
        return 0;
    }
    int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    int error = pidfd < 0 ? errno : 0;
    int sent = send_reply(sock, error ? 0 : getpid(), error, pidfd);
    tell_taken(taken);
    close(sock);
    if (pidfd >= 0) close(pidfd);
    if (sent < 0 || error) { /* unwatched, it must not run */
        drop_request(request);
        return 0;
    }
    return become_launcher(request->slots, request->fds + request->used,
                           request->fd_count - request->used);
}

/* A forked child's state before it takes a request: the signals as a launcher starts with
 * them, a session of its own, none of the resident's other descriptors. */
static void leave_resident(int signals, int taken[2], const sigset_t *original) {
    close(signals);
    if (taken[0] >= 0) close(taken[0]);
    sigprocmask(SIG_SETMASK, original, NULL);
    signal(SIGPIPE, SIG_DFL);
    setsid();
}

/* The resident's own children: its spare and the launchers it forked (a spare becomes one). */
static pid_list forked;

static void forget_forked(pid_t pid) {
    for (size_t i = 0; i < forked.len; i++) {
        if (forked.items[i] == pid) {
            forked.items[i] = forked.items[--forked.len];
            return;
        }
    }
}

static int was_forked(pid_t pid) {
    for (size_t i = 0; i < forked.len; i++) {
        if (forked.items[i] == pid) return 1;
    }
    return 0;
}

/* The resident is a child subreaper: a launcher that dies before its command's processes do
 * (killed: a command may kill its own launcher) leaves them to it, never to init. Every child
 * it did not fork is such an orphan, and is killed here; its own children come here in turn
 * when it dies (a SIGCHLD: another sweep). Returns how many were signalled. The children are
 * read from /proc/self/task/<pid>/children, else from every process's parent. */
static size_t sweep_orphans(void) {
    static pid_list children;
    children.len = 0;
    pid_t self = getpid();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)self);
    FILE *listed = fopen(path, "re");
    if (listed) {
        long pid;
        while (fscanf(listed, "%ld", &pid) == 1) push(&children, (pid_t)pid);
        fclose(listed);
    } else {
        DIR *proc = opendir("/proc");
        struct dirent *entry;
        while (proc && (entry = readdir(proc))) {
            if (entry->d_name[0] < '1' || entry->d_name[0] > '9') continue;
            if (parent_of(entry->d_name) == self) push(&children, (pid_t)atol(entry->d_name));
        }
        if (proc) closedir(proc);
    }
    size_t found = 0;
    for (size_t i = 0; i < children.len; i++) {
        /* One this process may not signal (a set-user-id program) is left to the next exit. */
        if (!was_forked(children.items[i]) && kill(children.items[i], SIGKILL) == 0) found++;
    }
    return found;
}

/* Process names (at most 15 characters), as /proc/PID/comm and ps show them. */
#define RESIDENT_NAME "fastgate-forker"
#define SPARE_NAME "fastgate-spare"
#define LAUNCHER_NAME "fastgate-launch"

/* Without a spare: the resident takes the request and forks its launcher. Returns -1 when the
 * server is gone. */
static int serve_one(int sock, int signals, int taken[2], const sigset_t *original) {
    request_t request;
    int got = receive_request(sock, &request);
    if (got <= 0) return got;
    STAGE("resident: request received");
    pid_t child = request.error ? -1 : fork();
    if (child > 0) push(&forked, child);
    if (child == 0) {
        prctl(PR_SET_NAME, LAUNCHER_NAME, 0, 0, 0);
        leave_resident(signals, taken, original);
        if (taken[1] >= 0) close(taken[1]);
        _exit(launch(sock, &request, -1));
    }
    int error = request.error ? request.error : errno;
    drop_request(&request);
    if (child > 0) return 0; /* the launcher replies */
    return send_reply(sock, 0, error, -1);
}

#define SERVER_GONE 3 /* a spare's exit status: the server closed the socket */

/* A launcher forked ahead of its request (the resident keeps one): it takes the next request
 * off the socket itself, so a command waits for no fork. It tells the resident on `taken`
 * (then another spare is forked); an idle one dies with the resident. */
static pid_t fork_spare(int sock, int signals, int taken[2], const sigset_t *original) {
    pid_t resident = getpid();
    /* Born with its name (how the server tells a spare from a launcher): the resident wears it
     * for the fork, so no moment shows a spare under another name. */
    prctl(PR_SET_NAME, SPARE_NAME, 0, 0, 0);
    pid_t child = fork();
    if (child != 0) {
        prctl(PR_SET_NAME, RESIDENT_NAME, 0, 0, 0);
        if (child > 0) push(&forked, child);
        return child;
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != resident) _exit(0);
    leave_resident(signals, taken, original);
    request_t request;
    int got;
    while ((got = receive_request(sock, &request)) == 0) {
    }
    if (got < 0) _exit(SERVER_GONE);
    STAGE("spare: request received");
    prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0); /* a launcher outlives the resident, as forked ones do */
    prctl(PR_SET_NAME, LAUNCHER_NAME, 0, 0, 0);
    _exit(launch(sock, &request, taken[1]));
}

/* fastgate-launcher --serve SOCKET_FD: serves each request received on the socket (the
 * server's end of a socketpair) until the server closes it, through a spare launcher forked
 * ahead of it (or, when the spare could not be forked, by forking one on the request); reaps
 * every launcher. Not dumpable: no process of the user may read its memory or take its
 * descriptors. */
static int serve(int sock) {
    prctl(PR_SET_NAME, RESIDENT_NAME, 0, 0, 0); /* its launchers are born under this name */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); /* see sweep_orphans() */
    fcntl(sock, F_SETFD, FD_CLOEXEC);
    signal(SIGPIPE, SIG_IGN);
    sigset_t child, original;
    sigemptyset(&child);
    sigaddset(&child, SIGCHLD);
    sigprocmask(SIG_BLOCK, &child, &original);
    int signals = signalfd(-1, &child, SFD_CLOEXEC | SFD_NONBLOCK);
    if (signals < 0) return 1;
    int taken[2] = {-1, -1}; /* a spare writes a byte when it has taken a request */
    if (pipe2(taken, O_CLOEXEC | O_NONBLOCK) != 0) taken[0] = taken[1] = -1;
    pid_t spare = 0; /* < 0: it could not be forked; the resident takes the requests itself */
    size_t orphans = 0; /* found by the last sweep: look again soon, until none is left */
    for (;;) {
        if (spare <= 0 && taken[0] >= 0) spare = fork_spare(sock, signals, taken, &original);
        /* The socket is the spare's to read while there is one: a request goes to one reader. */
        struct pollfd watched[3] = {
            {spare > 0 ? -1 : sock, POLLIN, 0}, {signals, POLLIN, 0}, {taken[0], POLLIN, 0}};
        if (poll(watched, 3, orphans ? RESCAN_MS : -1) < 0 && errno != EINTR) return 1;
        if (watched[1].revents) {
            struct signalfd_siginfo info;
            while (read(signals, &info, sizeof info) == (ssize_t)sizeof info) {
            }
        }
        /* Read before reaping: a spare writes its byte before it can exit as a launcher. */
        char bytes[16];
        if (taken[0] >= 0 && read(taken[0], bytes, sizeof bytes) > 0) spare = 0;
        int status;
        pid_t pid;
        int reaped = 0;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            reaped = 1;
            forget_forked(pid);
            if (pid != spare) continue;
            spare = 0; /* died idle (killed): replaced above */
            if (WIFEXITED(status) && WEXITSTATUS(status) == SERVER_GONE) return 0;
        }
        if (reaped || orphans) orphans = sweep_orphans();
        if (watched[0].revents && serve_one(sock, signals, taken, &original) < 0) return 0;
    }
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--serve") == 0) return serve(atoi(argv[2]));
    return run_launcher(argc, argv);
}
