/* SIGBUS on a mapped file, turned into an error code for the access that faulted.
 *
 * A map outlives the file length it was made for: when the file is cut under it
 * (a damaged disk, an operator's truncate), touching a page past the new end
 * raises SIGBUS, whose default action ends the process; so does the first write
 * to a hole of a sparse file when the disk is full (no block to give it). `ls_guarded` runs an
 * access with the faulting range registered for the calling thread; the
 * handler, installed once, jumps back to it when the fault lies in that range,
 * and `ls_guarded` returns LS_FAULT. Any other SIGBUS goes to the handler that
 * was there before (Python's faulthandler, or the default action: put back, so
 * the fault happens again and ends the process as it would have).
 *
 * Rules that make the jump safe:
 * - the access (`body`) is plain C over the map: no Python object, lock or
 *   allocation is held across it, so abandoning it mid-way leaks nothing;
 * - the handler runs with SA_NODEFER, so jumping out of it leaves SIGBUS
 *   unblocked and sigsetjmp need not save the signal mask (no syscall per access);
 * - the per-thread state is one pointer in initial-exec TLS, read without
 *   calling into the dynamic linker from the handler.
 */
#ifndef LS_MAP_GUARD_H
#define LS_MAP_GUARD_H

#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>

#define LS_FAULT (-2)

typedef int (*ls_guarded_body)(void *ctx);

typedef struct ls_guard {
    sigjmp_buf env;
    const char *start;
    size_t length;
} ls_guard;

static __thread ls_guard *ls_current_guard __attribute__((tls_model("initial-exec")));
static struct sigaction ls_previous_bus;
static volatile sig_atomic_t ls_bus_installed;

static void ls_on_sigbus(int signum, siginfo_t *info, void *context)
{
    ls_guard *guard = ls_current_guard;
    if (guard != NULL) {
        const char *address = (const char *)info->si_addr;
        /* si_code <= 0: sent by kill/raise, carrying no address. A handler installed
           over this one (faulthandler enabled later) re-raises the fault that way
           after restoring this handler; inside a guard that is the guarded access. */
        if (info->si_code <= 0 || (address >= guard->start && (size_t)(address - guard->start) < guard->length)) {
            ls_current_guard = NULL;
            siglongjmp(guard->env, 1);
        }
    }
    /* Not ours: to the handler that was there before (faulthandler dumps the tracebacks, puts its
       own predecessor back and raises again), as if this one did not exist. */
    if (ls_previous_bus.sa_flags & SA_SIGINFO) {
        if (ls_previous_bus.sa_sigaction != NULL) {
            ls_previous_bus.sa_sigaction(signum, info, context);
            return;
        }
    } else if (ls_previous_bus.sa_handler != SIG_DFL && ls_previous_bus.sa_handler != SIG_IGN) {
        ls_previous_bus.sa_handler(signum);
        return;
    }
    /* The default action: put it back; a real fault then happens again when this returns, a sent
       signal is raised again. */
    sigaction(SIGBUS, &ls_previous_bus, NULL);
    if (info->si_code <= 0)
        raise(signum);
}

/* Install the handler once per process (per extension module including this header); 0 or -1 with errno. */
static int ls_guard_install(void)
{
    struct sigaction action;
    if (ls_bus_installed)
        return 0;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = ls_on_sigbus;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    if (sigaction(SIGBUS, &action, &ls_previous_bus) != 0)
        return -1;
    ls_bus_installed = 1;
    return 0;
}

/* body(ctx) with faults on [start, start + length) returning LS_FAULT instead of killing the process. */
static int ls_guarded(const void *start, size_t length, ls_guarded_body body, void *ctx)
{
    ls_guard guard;
    ls_guard *volatile outer = ls_current_guard;
    int result;
    guard.start = (const char *)start;
    guard.length = length;
    if (sigsetjmp(guard.env, 0) != 0) {
        ls_current_guard = outer;
        return LS_FAULT;
    }
    ls_current_guard = &guard;
    result = body(ctx);
    ls_current_guard = outer;
    return result;
}

#endif
