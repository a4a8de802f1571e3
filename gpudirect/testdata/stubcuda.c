/* Stand-ins for libcufile.so.0 and libcudart.so.12 with the C signatures
 * of NVIDIA's headers (cufile.h, cuda_runtime_api.h), for gpudirect's
 * tests on machines without a GPU: "device memory" is host memory, and
 * cuFileRead is pread(2), cuFileWrite pwrite(2). Built twice by the tests, with -DSTUB_CUFILE
 * and with -DSTUB_CUDART. The stub cuFile refuses descriptors without
 * O_DIRECT, as cuFile does outside its compatibility mode. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#ifdef STUB_CUFILE
typedef struct { int err; int cu_err; } CUfileError_t;
typedef struct {
	int type;
	union { int fd; void *handle; } handle;
	const void *fs_ops;
} CUfileDescr_t;
typedef void *CUfileHandle_t;

static int opened;
static long reads, writes, registered_bufs, registered_handles;

long stub_cufile_reads(void) { return reads; }
long stub_cufile_writes(void) { return writes; }
long stub_cufile_open_handles(void) { return registered_handles; }
long stub_cufile_open_bufs(void) { return registered_bufs; }

CUfileError_t cuFileDriverOpen(void) { opened = 1; CUfileError_t e = {0, 0}; return e; }
CUfileError_t cuFileDriverClose_v2(void) { opened = 0; CUfileError_t e = {0, 0}; return e; }

CUfileError_t cuFileHandleRegister(CUfileHandle_t *fh, CUfileDescr_t *d) {
	CUfileError_t e = {0, 0};
	if (!opened) { e.err = 5001; return e; }
	if (d->type != 1 || d->fs_ops != NULL) { e.err = 5022; return e; }
	int fl = fcntl(d->handle.fd, F_GETFL);
	if (fl < 0) { e.err = 5022; return e; }
	if (!(fl & O_DIRECT)) { e.err = 5020; return e; }
	/* as libcufile 1.15 (CUDA 13) does: "unsupported file open flags" */
	if (fl & O_NOFOLLOW) { e.err = 5019; return e; }
	*fh = (void *)(long)(d->handle.fd + 1);
	registered_handles++;
	return e;
}

void cuFileHandleDeregister(CUfileHandle_t fh) { (void)fh; registered_handles--; }

CUfileError_t cuFileBufRegister(const void *p, size_t n, int flags) {
	CUfileError_t e = {0, 0};
	if (p == NULL || n == 0 || flags != 0) e.err = 5022; else registered_bufs++;
	return e;
}

CUfileError_t cuFileBufDeregister(const void *p) {
	CUfileError_t e = {0, 0};
	if (p == NULL) e.err = 5022; else registered_bufs--;
	return e;
}

ssize_t cuFileRead(CUfileHandle_t fh, void *base, size_t size, off_t off, off_t boff) {
	int fd = (int)(long)fh - 1;
	size_t got = 0;
	reads++;
	while (got < size) {
		/* O_DIRECT wants aligned lengths: read whole blocks through a
		 * bounce buffer, as cuFile does for an unaligned tail. */
		size_t want = size - got, ask = (want + 4095) & ~(size_t)4095;
		void *bounce;
		if (posix_memalign(&bounce, 4096, ask)) return -5030;
		ssize_t n = pread(fd, bounce, ask, off + got);
		if (n < 0) { free(bounce); return -1; }
		if ((size_t)n > want) n = want;
		memcpy((char *)base + boff + got, bounce, n);
		free(bounce);
		if (n == 0) break;
		got += n;
	}
	return got;
}

/* cuFileWrite of whole blocks only: a partial block through O_DIRECT
 * is the caller's to avoid (gpudirect writes it through the mount). */
ssize_t cuFileWrite(CUfileHandle_t fh, const void *base, size_t size, off_t off, off_t boff) {
	int fd = (int)(long)fh - 1;
	writes++;
	if (size % 4096 || off % 4096) return -5022;
	void *bounce;
	if (posix_memalign(&bounce, 4096, size ? size : 4096)) return -5030;
	memcpy(bounce, (const char *)base + boff, size);
	size_t put = 0;
	while (put < size) {
		ssize_t n = pwrite(fd, (char *)bounce + put, size - put, off + put);
		if (n <= 0) { free(bounce); return -1; }
		put += n;
	}
	free(bounce);
	return put;
}
#endif

#ifdef STUB_CUDART
static int device;
int cudaSetDevice(int d) { if (d < 0 || d > 1) return 101; device = d; return 0; }
int cudaMalloc(void **p, size_t n) { return posix_memalign(p, 4096, n) ? 2 : 0; }
int cudaFree(void *p) { free(p); return 0; }
int cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
	if (kind != 1 && kind != 2) return 21;
	memcpy(dst, src, n);
	return 0;
}
const char *cudaGetErrorString(int e) {
	switch (e) {
	case 101: return "invalid device ordinal";
	case 2: return "out of memory";
	default: return "stub error";
	}
}
#endif
