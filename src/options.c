/* HAKMEM_* options, read once at start-up into plain globals, and the
 * allocator's messages (formatted here, without printf, which may allocate). */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "internal.h"

typedef struct option_desc_s {
  const char *name;          /* after HAKMEM_ */
  long fallback;
  long least, most;          /* the values it takes (-1: "never") */
  bool size;                 /* a size: takes a k, m or g suffix */
} option_desc_t;

/* Keep in step with the option table in README.md. */
static const option_desc_t option_descs[HAK_OPT_COUNT] = {
  [HAK_OPT_VERBOSE]     = { "VERBOSE", 0, 0, 1, false },
  [HAK_OPT_STATS]       = { "STATS", HAK_STATS_OFF, 0, 0, false },   /* (words: parse_option) */
  [HAK_OPT_PURGE_DELAY] = { "PURGE_DELAY", 10, -1, LONG_MAX, false },
  [HAK_OPT_PURGE_MODE]  = { "PURGE", HAK_PURGE_DONTNEED, 0, 0, false },   /* (words) */
  [HAK_OPT_ARENAS]      = { "ARENAS", 0, 0, HAK_ARENAS_MAX, false },   /* (0: as many as CPUs, at most 8) */
  [HAK_OPT_HUGE_CACHE] = { "HUGE_CACHE", 128L << 20, 0, LONG_MAX, true },
  [HAK_OPT_BACKGROUND]  = { "BACKGROUND", 1, 0, 1, false },
  [HAK_OPT_ZERO_ON_FREE] = { "ZERO_ON_FREE", 0, 0, 1, false },   /* secure variant only */
  [HAK_OPT_HUGE_PAGES]  = { "HUGE_PAGES", 1, 0, 1, false },
};

long hak_options[HAK_OPT_COUNT];

/* "123", "-1", or (`size`) a size with a k/m/g suffix ("64m"); false if
 * it does not fit a long once scaled. */
static bool parse_number(const char *s, bool size, long *out) {
  bool negative = *s == '-';
  if (negative) s++;
  if (*s < '0' || *s > '9') return false;
  long v = 0;
  while (*s >= '0' && *s <= '9') {
    int digit = *s++ - '0';
    if (v > (LONG_MAX - digit) / 10) return false;
    v = v * 10 + digit;
  }
  int shift = 0;
  switch (size ? *s | 0x20 : 0) {
    case 'k': shift = 10; s++; break;
    case 'm': shift = 20; s++; break;
    case 'g': shift = 30; s++; break;
    default: break;
  }
  if (v > LONG_MAX >> shift) return false;
  v <<= shift;
  if (size && (*s == 'b' || *s == 'B')) s++;
  if (*s != 0) return false;
  *out = negative ? -v : v;
  return true;
}

static bool parse_option(hak_option_t o, const char *s, long *out) {
  switch (o) {
    case HAK_OPT_STATS:
      if (strcmp(s, "json") == 0) { *out = HAK_STATS_JSON; return true; }
      if (strcmp(s, "text") == 0 || strcmp(s, "1") == 0) { *out = HAK_STATS_TEXT; return true; }
      if (strcmp(s, "0") == 0) { *out = HAK_STATS_OFF; return true; }
      return false;
    case HAK_OPT_PURGE_MODE:
      if (strcmp(s, "dontneed") == 0) { *out = HAK_PURGE_DONTNEED; return true; }
      if (strcmp(s, "free") == 0) { *out = HAK_PURGE_FREE; return true; }
      return false;
    default: {
      long v;
      if (!parse_number(s, option_descs[o].size, &v) || v < option_descs[o].least || v > option_descs[o].most)
        return false;   /* (a negative size: no size) */
      *out = v;
      return true;
    }
  }
}

extern char **environ;

void hak_options_init(void) {
  char name[64];
  for (int o = 0; o < HAK_OPT_COUNT; o++) {
    hak_options[o] = option_descs[o].fallback;
    hak_format(name, sizeof name, "HAKMEM_%s", option_descs[o].name);
    const char *value = secure_getenv(name);   /* (a set-user-ID program: none, as glibc's MALLOC_*) */
    if (value != NULL && !parse_option((hak_option_t)o, value, &hak_options[o]))
      hak_message("hakmem: warning: ignoring %s=%s (not a valid value)\n", name, value);
  }
  if (!hak_option(HAK_OPT_VERBOSE) || environ == NULL) return;
  for (char **e = environ; *e != NULL; e++) {
    if (strncmp(*e, "HAKMEM_", 7) != 0) continue;
    const char *key = *e + 7;
    size_t len = strcspn(key, "=");
    bool known = false;
    for (int o = 0; o < HAK_OPT_COUNT && !known; o++)
      known = strlen(option_descs[o].name) == len && strncmp(option_descs[o].name, key, len) == 0;
    if (!known) hak_message("hakmem: warning: unknown option %.*s\n", (int)(len + 7), *e);
  }
}

/* ------------------------------------------------------------ formatting */

typedef struct out_s { char *buf; size_t cap, len; } out_t;

static void out_char(out_t *o, char c) {
  if (o->len + 1 < o->cap) o->buf[o->len] = c;
  o->len++;
}

static void out_text(out_t *o, const char *s, size_t n, int width, bool left) {
  for (int pad = width - (int)n; !left && pad > 0; pad--) out_char(o, ' ');
  for (size_t i = 0; i < n; i++) out_char(o, s[i]);
  for (int pad = width - (int)n; left && pad > 0; pad--) out_char(o, ' ');
}

static void out_unsigned(out_t *o, unsigned long long v, unsigned base, bool negative, int width, bool left, bool zero) {
  char digits[24];
  size_t n = 0;
  do { digits[n++] = "0123456789abcdef"[v % base]; v /= base; } while (v != 0);
  int pad = width - (int)n - negative;
  if (negative && zero) out_char(o, '-');
  for (int i = 0; !left && i < pad; i++) out_char(o, zero ? '0' : ' ');
  if (negative && !zero) out_char(o, '-');
  while (n > 0) out_char(o, digits[--n]);
  for (int i = 0; left && i < pad; i++) out_char(o, ' ');
}

/* A small vsnprintf: %s %.*s %c %d %i %u %x %p with l/ll/z, width, '-', '0'. */
static size_t format_v(char *buf, size_t cap, const char *fmt, va_list ap) {
  out_t o = { buf, cap, 0 };
  for (const char *f = fmt; *f; f++) {
    if (*f != '%') { out_char(&o, *f); continue; }
    f++;
    bool left = false, zero = false;
    for (;; f++) {
      if (*f == '-') left = true;
      else if (*f == '0') zero = true;
      else break;
    }
    int width = 0, precision = -1;
    while (*f >= '0' && *f <= '9') width = width * 10 + (*f++ - '0');
    if (*f == '.' && f[1] == '*') { precision = va_arg(ap, int); f += 2; }
    int longs = 0;
    bool is_size = false;
    while (*f == 'l') { longs++; f++; }
    if (*f == 'z') { is_size = true; f++; }
    switch (*f) {
      case 's': {
        const char *s = va_arg(ap, const char *);
        if (s == NULL) s = "(null)";
        size_t n = strlen(s);
        if (precision >= 0 && (size_t)precision < n) n = (size_t)precision;
        out_text(&o, s, n, width, left);
        break;
      }
      case 'c': { char c = (char)va_arg(ap, int); out_text(&o, &c, 1, width, left); break; }
      case 'd': case 'i': {
        long long v = is_size ? (long long)va_arg(ap, ssize_t) : longs ? va_arg(ap, long long) : va_arg(ap, int);
        out_unsigned(&o, v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v, 10, v < 0, width, left, zero);
        break;
      }
      case 'u': case 'x': {
        unsigned long long v = is_size ? va_arg(ap, size_t) : longs ? va_arg(ap, unsigned long long) : va_arg(ap, unsigned);
        out_unsigned(&o, v, *f == 'x' ? 16 : 10, false, width, left, zero);
        break;
      }
      case 'p':
        out_text(&o, "0x", 2, 0, false);
        out_unsigned(&o, (uintptr_t)va_arg(ap, void *), 16, false, 0, false, false);
        break;
      case '%': out_char(&o, '%'); break;
      case 0: f--; break;
      default: out_char(&o, '%'); out_char(&o, *f); break;
    }
  }
  if (cap > 0) buf[o.len < cap ? o.len : cap - 1] = 0;
  return o.len;
}

size_t hak_format(char *buf, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t n = format_v(buf, cap, fmt, ap);
  va_end(ap);
  return n;
}

/* By the system call, not libc's write, a thread cancellation point: no
 * allocator function may be one (POSIX), and malloc_stats writes with its
 * report lock held. */
static void write_all(int fd, const char *s, size_t n) {
  while (n > 0) {
    ssize_t w = syscall(SYS_write, fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

/* A message longer than the buffer is cut, but still ends its line if it
 * did (a long value of an option named in a warning). */
static void format_to_fd(int fd, const char *fmt, va_list ap) {
  char buf[512];
  size_t n = format_v(buf, sizeof buf, fmt, ap), len = strlen(fmt);
  if (n >= sizeof buf) {
    n = sizeof buf - 1;
    if (len > 0 && fmt[len - 1] == '\n') buf[n - 1] = '\n';
  }
  write_all(fd, buf, n);
}

void hak_format_fd(int fd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  format_to_fd(fd, fmt, ap);
  va_end(ap);
}

void hak_message(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  format_to_fd(STDERR_FILENO, fmt, ap);
  va_end(ap);
}

void hak_verbose(const char *fmt, ...) {
  if (!hak_option(HAK_OPT_VERBOSE)) return;
  va_list ap;
  va_start(ap, fmt);
  format_to_fd(STDERR_FILENO, fmt, ap);
  va_end(ap);
}

/* Misuse that would corrupt memory if we went on: one line, then abort. */
void hak_fatal(const char *fmt, ...) {
  char line[256];
  size_t n = hak_format(line, sizeof line, "hakmem: error: ");
  va_list ap;
  va_start(ap, fmt);
  n += format_v(line + n, sizeof line - n, fmt, ap);
  va_end(ap);
  if (n > sizeof line - 2) n = sizeof line - 2;
  line[n++] = '\n';
  write_all(STDERR_FILENO, line, n);
  abort();
}
