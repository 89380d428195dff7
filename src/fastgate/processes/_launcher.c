/*
 * fastgate-launcher: the parent of one command, and the reaper of every process it starts.
 *
 *     fastgate-launcher GRACE_MS CONTROL_FD REPORT_FD EXECUTABLE ARG0 [ARG...]
 *
 * The same program as _launcher.py (which states the protocol); this one starts in about a
 * millisecond where the Python one needs an interpreter. It makes itself a child subreaper, so
 * every process the command starts stays its descendant however it detaches (setsid, double
 * fork, nohup ... &): an orphan is re-parented here, never to init. When the command exits, or
 * the parent asks (a line "T <grace_ms>" on CONTROL_FD, or the end of that pipe: the parent
 * is gone), every descendant gets SIGTERM, then SIGKILL after the grace, and is reaped before
 * this process exits. Descendants are found through each process's parent in /proc/<pid>/stat.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GIVE_UP_MS 2000 /* after the first SIGKILL: how long the killed may take to die */
#define RESCAN_MS 10    /* while killing: how often to look for processes forked meanwhile */
#define LONGEST_WAIT_MS 60000 /* one poll at most (a long grace is waited in several) */

static int report_fd = -1;

static void report(char kind, long value) {
    char line[32];
    int n = snprintf(line, sizeof line, "%c %ld\n", kind, value);
    if (write(report_fd, line, (size_t)n) < 0) {
        /* the parent is gone (SIGPIPE is ignored): ending everything goes on */
    }
}

static long long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

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
 * reached even where /proc cannot be read. */
static size_t signal_all(int sig, pid_t command, int command_done, size_t *refused) {
    static pid_list found;
    if (!command_done) {
        kill(-command, sig);
        kill(command, sig);
    }
    descendants(&found);
    *refused = 0;
    for (size_t i = 0; i < found.len; i++) {
        if (kill(found.items[i], sig) != 0 && errno == EPERM) (*refused)++;
        if (sig == SIGTERM) kill(found.items[i], SIGCONT); /* a stopped process gets it too */
    }
    return found.len;
}

/* Collects every exited child; reports the command's status. Returns 0 when no child is left
 * (then no descendant is: every orphan below is re-parented here). */
static int reap(pid_t command, int *command_done) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (pid == command) {
            *command_done = 1;
            report('X', WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status));
        }
    }
    return !(pid < 0 && errno == ECHILD);
}

static void quiet_stdio(void) {
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd < 3; fd++) {
        if (null < 0 || dup2(null, fd) < 0) close(fd);
    }
    if (null > 2) close(null);
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s GRACE_MS CONTROL_FD REPORT_FD EXECUTABLE ARG0 [ARG...]\n",
                argv[0]);
        return 125;
    }
    long long grace = atoll(argv[1]);
    int control_fd = atoi(argv[2]);
    report_fd = atoi(argv[3]);
    const char *executable = argv[4];
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
    sigset_t handled, original;
    sigemptyset(&handled);
    int stops[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof stops / sizeof *stops; i++) sigaddset(&handled, stops[i]);
    sigprocmask(SIG_BLOCK, &handled, &original);
    int signals = signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
    int started[2];
    if (signals < 0 || pipe2(started, O_CLOEXEC) != 0) {
        report('E', errno);
        return 0;
    }
    pid_t self = getpid();
    pid_t command = fork();
    if (command == 0) {
        close(started[0]);
        setsid();
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0); /* should this launcher be killed */
        if (getppid() != self) _exit(127);
        signal(SIGPIPE, SIG_DFL);
        sigprocmask(SIG_SETMASK, &original, NULL);
        if (strchr(executable, '/')) {
            execv(executable, argv + 5);
        } else {
            execvp(executable, argv + 5);
        }
        int error = errno;
        if (write(started[1], &error, sizeof error) < 0) _exit(126);
        _exit(127);
    }
    if (command < 0) {
        report('E', errno);
        return 0;
    }
    close(started[1]);
    quiet_stdio(); /* the command's output ends when the command's processes do, not later */
    int error;
    if (read(started[0], &error, sizeof error) == (ssize_t)sizeof error) {
        waitpid(command, NULL, 0);
        report('E', error);
        return 0;
    }
    close(started[0]);
    report('S', command);

    int command_done = 0, phase = 0; /* 0 running, 1 TERM sent, 2 KILL */
    long long kill_at = 0, give_up_at = 0;
    size_t found = 0, refused = 0;
    struct pollfd watched[2] = {{signals, POLLIN, 0}, {control_fd, POLLIN, 0}};
    long long stop_grace = -1; /* >= 0: a stop was asked, with this grace */
    for (;;) {
        if (!reap(command, &command_done)) break;
        if (command_done && stop_grace < 0) stop_grace = grace;
        long long now = now_ms();
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
        int timeout = wait > LONGEST_WAIT_MS ? LONGEST_WAIT_MS : (int)wait;
        if (poll(watched, control_fd >= 0 ? 2 : 1, timeout) < 0 && errno != EINTR) break;
        if (watched[0].revents) {
            struct signalfd_siginfo info;
            while (read(signals, &info, sizeof info) == (ssize_t)sizeof info) {
                if (info.ssi_signo != SIGCHLD && stop_grace < 0) stop_grace = grace;
            }
        }
        if (control_fd >= 0 && watched[1].revents) {
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
    return 0;
}
