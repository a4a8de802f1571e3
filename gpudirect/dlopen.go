package gpudirect

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// The shared objects SystemLibraries tries, newest first. dlopen finds
// them the usual way (LD_LIBRARY_PATH, the ld.so cache).
var (
	CuFileNames = []string{"libcufile.so.0", "libcufile.so"}
	CudartNames = []string{"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"}
)

// SystemLibraries loads the installed CUDA runtime and cuFile at run time
// (no cgo, no CUDA at build time).
func SystemLibraries() Libraries { return LoadLibraries(CuFileNames, CudartNames) }

// LoadLibraries loads cuFile from the first of cufile that opens and the
// CUDA runtime from the first of cudart that opens.
func LoadLibraries(cufile, cudart []string) Libraries {
	var libs Libraries
	if rt, err := loadCudart(cudart); err != nil {
		libs.RuntimeErr = err
	} else {
		libs.Runtime = rt
	}
	if cf, err := loadCuFile(cufile); err != nil {
		libs.CuFileErr = err
	} else {
		libs.CuFile = cf
	}
	return libs
}

// dlopenFirst opens the first library of names that opens.
func dlopenFirst(names []string) (uintptr, error) {
	var why error
	for _, name := range names {
		h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err == nil {
			return h, nil
		}
		// The first failure that is not a plain absence says most.
		if why == nil || strings.Contains(why.Error(), "No such file") {
			why = err
		}
	}
	return 0, fmt.Errorf("cannot load %s (%v)", strings.Join(names, ", "), why)
}

// bind sets each function pointer to its symbol in lib; the first name
// a symbol has that lib exports wins (cuFileDriverClose_v2 before
// cuFileDriverClose).
func bind(lib uintptr, fns map[string]any) error {
	for names, fptr := range fns {
		var sym uintptr
		for _, name := range strings.Split(names, "|") {
			if s, err := purego.Dlsym(lib, name); err == nil {
				sym = s
				break
			}
		}
		if sym == 0 {
			return fmt.Errorf("symbol %s not found", names)
		}
		purego.RegisterFunc(fptr, sym)
	}
	return nil
}

// cuFileError is CUfileError_t: { CUfileOpError err; CUresult cu_err; }.
type cuFileError struct {
	Err   int32
	CuErr int32
}

func (e cuFileError) err(call string) error {
	if e.Err == 0 {
		return nil
	}
	return &CuFileError{Call: call, Code: int(e.Err), CUResult: int(e.CuErr)}
}

// cuFileDescr is CUfileDescr_t: { enum type; union { int fd; void
// *handle; } handle; const CUfileFSOps_t *fs_ops; }. The fd sits in the
// union's low four bytes (little-endian amd64 and arm64).
type cuFileDescr struct {
	Type   int32
	_      int32
	Handle uintptr
	FSOps  uintptr
}

// cuFileHandleTypeOpaqueFD is CU_FILE_HANDLE_TYPE_OPAQUE_FD.
const cuFileHandleTypeOpaqueFD = 1

type cuFileLib struct {
	driverOpen       func() cuFileError
	driverClose      func() cuFileError
	handleRegister   func(fh *uintptr, descr *cuFileDescr) cuFileError
	handleDeregister func(fh uintptr)
	bufRegister      func(ptr, length uintptr, flags int32) cuFileError
	bufDeregister    func(ptr uintptr) cuFileError
	read             func(fh, ptr, size uintptr, fileOff, bufOff int64) int64
	write            func(fh, ptr, size uintptr, fileOff, bufOff int64) int64
}

var _ CuFile = (*cuFileLib)(nil)

func loadCuFile(names []string) (*cuFileLib, error) {
	lib, err := dlopenFirst(names)
	if err != nil {
		return nil, err
	}
	c := &cuFileLib{}
	err = bind(lib, map[string]any{
		"cuFileDriverOpen":                       &c.driverOpen,
		"cuFileDriverClose_v2|cuFileDriverClose": &c.driverClose,
		"cuFileHandleRegister":                   &c.handleRegister,
		"cuFileHandleDeregister":                 &c.handleDeregister,
		"cuFileBufRegister":                      &c.bufRegister,
		"cuFileBufDeregister":                    &c.bufDeregister,
		"cuFileRead":                             &c.read,
		"cuFileWrite":                            &c.write,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", names[0], err)
	}
	return c, nil
}

func (c *cuFileLib) DriverOpen() error  { return c.driverOpen().err("cuFileDriverOpen") }
func (c *cuFileLib) DriverClose() error { return c.driverClose().err("cuFileDriverClose") }

func (c *cuFileLib) HandleRegister(fd int) (uintptr, error) {
	d := cuFileDescr{Type: cuFileHandleTypeOpaqueFD, Handle: uintptr(uint32(fd))}
	var h uintptr
	return h, c.handleRegister(&h, &d).err("cuFileHandleRegister")
}

func (c *cuFileLib) HandleDeregister(h uintptr) { c.handleDeregister(h) }

func (c *cuFileLib) BufRegister(ptr uintptr, size int) error {
	return c.bufRegister(ptr, uintptr(size), 0).err("cuFileBufRegister")
}

func (c *cuFileLib) BufDeregister(ptr uintptr) error {
	return c.bufDeregister(ptr).err("cuFileBufDeregister")
}

// Read is cuFileRead: the bytes read (see ioResult).
func (c *cuFileLib) Read(h, ptr uintptr, size int, fileOff, bufOff int64) (int, error) {
	return ioResult("cuFileRead", c.read(h, ptr, uintptr(size), fileOff, bufOff))
}

// Write is cuFileWrite: the bytes written (see ioResult).
func (c *cuFileLib) Write(h, ptr uintptr, size int, fileOff, bufOff int64) (int, error) {
	return ioResult("cuFileWrite", c.write(h, ptr, uintptr(size), fileOff, bufOff))
}

// ioResult decodes what cuFileRead and cuFileWrite return: the bytes
// moved; -1 for a file system error (in errno, which a call through
// purego cannot read), or minus a CUfileOpError.
func ioResult(call string, n int64) (int, error) {
	switch {
	case n == -1:
		return 0, errors.New(call + ": file system error")
	case n < 0:
		return 0, &CuFileError{Call: call, Code: int(-n)}
	}
	return int(n), nil
}

// cudaMemcpyKind values.
const (
	cudaMemcpyHostToDevice = 1
	cudaMemcpyDeviceToHost = 2
)

type cudartLib struct {
	setDevice   func(ordinal int32) int32
	malloc      func(ptr *uintptr, size uintptr) int32
	free        func(ptr uintptr) int32
	memcpyHtoD  func(dst uintptr, src unsafe.Pointer, n uintptr, kind int32) int32
	memcpyDtoH  func(dst unsafe.Pointer, src uintptr, n uintptr, kind int32) int32
	errorString func(code int32) string
}

var _ Runtime = (*cudartLib)(nil)

func loadCudart(names []string) (*cudartLib, error) {
	lib, err := dlopenFirst(names)
	if err != nil {
		return nil, err
	}
	c := &cudartLib{}
	err = bind(lib, map[string]any{
		"cudaSetDevice":      &c.setDevice,
		"cudaMalloc":         &c.malloc,
		"cudaFree":           &c.free,
		"cudaGetErrorString": &c.errorString,
	})
	if err == nil {
		// One symbol, two Go signatures: host memory passed to it must
		// be an unsafe.Pointer so that it stays alive for the call.
		err = bind(lib, map[string]any{"cudaMemcpy": &c.memcpyHtoD})
	}
	if err == nil {
		err = bind(lib, map[string]any{"cudaMemcpy": &c.memcpyDtoH})
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", names[0], err)
	}
	return c, nil
}

func (c *cudartLib) check(call string, code int32) error {
	if code == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s (cudaError %d)", call, c.errorString(code), code)
}

func (c *cudartLib) SetDevice(n int) error { return c.check("cudaSetDevice", c.setDevice(int32(n))) }

func (c *cudartLib) Malloc(size int) (uintptr, error) {
	var p uintptr
	return p, c.check("cudaMalloc", c.malloc(&p, uintptr(size)))
}

func (c *cudartLib) Free(p uintptr) error { return c.check("cudaFree", c.free(p)) }

func (c *cudartLib) CopyToDevice(dst uintptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return c.check("cudaMemcpy", c.memcpyHtoD(dst, unsafe.Pointer(&src[0]), uintptr(len(src)), cudaMemcpyHostToDevice))
}

func (c *cudartLib) CopyFromDevice(dst []byte, src uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	return c.check("cudaMemcpy", c.memcpyDtoH(unsafe.Pointer(&dst[0]), src, uintptr(len(dst)), cudaMemcpyDeviceToHost))
}

// CuFileError is an error cuFile returned.
type CuFileError struct {
	Call     string
	Code     int // CUfileOpError
	CUResult int // the CUDA driver's error, for CU_FILE_CUDA_DRIVER_ERROR
}

func (e *CuFileError) Error() string {
	s := fmt.Sprintf("%s: %s (CUfileOpError %d)", e.Call, cuFileErrorName(e.Code), e.Code)
	if e.CUResult != 0 {
		s += fmt.Sprintf(", CUresult %d", e.CUResult)
	}
	return s
}

// cuFileErrorName names the cuFile errors a loader is likely to meet.
func cuFileErrorName(code int) string {
	names := map[int]string{
		5001: "nvidia-fs driver is not loaded", 5007: "GPUDirect Storage not supported on this platform",
		5008: "GPUDirect Storage not supported on this file", 5009: "GPUDirect Storage not supported on this GPU",
		5011: "CUDA driver error", 5012: "invalid device pointer", 5018: "unsupported file type",
		5019: "unsupported file open flags", 5020: "O_DIRECT not set on the descriptor",
		5022: "invalid arguments", 5025: "driver or file access error", 5027: "file not registered (cufile.log says why)",
		5029: "GPU device not found",
		5030: "internal error", 5034: "GPUDirect Storage disabled by configuration for this file",
	}
	if n, ok := names[code]; ok {
		return n
	}
	return "cuFile error"
}
