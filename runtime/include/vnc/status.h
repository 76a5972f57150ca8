/* vnc/status.h — status codes and error messages of the virtual NeuronCore runtime.
 *
 * Every runtime call returns a vnc_status. On failure the calling thread's last-error
 * buffer holds a human-readable message:
 *
 *     vnc_status st = vnc_malloc(0, 1 << 20, stream, &ptr, &block);
 *     if (st != VNC_OK) fprintf(stderr, "%s\n", vnc_last_error());
 */
#ifndef VNC_STATUS_H
#define VNC_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vnc_status {
  VNC_OK = 0,
  VNC_ERR_INVALID_ARGUMENT = 1, /* a caller-supplied value is out of range */
  VNC_ERR_INVALID_DEVICE = 2,   /* device index outside 0..count-1 */
  VNC_ERR_OUT_OF_MEMORY = 3,    /* the core's memory capacity would be exceeded */
  VNC_ERR_KERNEL = 4,           /* an enqueued operation failed (sticky until the next sync) */
  VNC_ERR_FORKED = 5,           /* the runtime was initialised before fork(); unusable in the child */
  VNC_ERR_UNSUPPORTED = 6,      /* dtype or layout the kernel does not handle */
  VNC_ERR_INTERNAL = 7,         /* a system call failed (thread creation, mmap) */
  VNC_ERR_INDEX = 8             /* a kernel met an index outside its range (sticky like VNC_ERR_KERNEL) */
} vnc_status;

/* Message describing the last failure on the calling thread; never NULL; valid until the
 * next failing runtime call on this thread. */
const char *vnc_last_error(void);

/* Records a formatted message as the calling thread's last error and returns `st`. */
vnc_status vnc_set_error(vnc_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Short name of a status code ("VNC_ERR_OUT_OF_MEMORY"). */
const char *vnc_status_name(vnc_status st);

#ifdef __cplusplus
}
#endif
#endif
