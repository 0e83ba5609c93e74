//go:build linux

package probe

import (
	"net/netip"
	"syscall"
	"unsafe"
)

// The async loop's system calls on its non-blocking sockets and its epoll
// instance never block: a write or read that cannot proceed returns
// EAGAIN, and the loop polls epoll with a zero timeout. So they are made
// raw, without telling the runtime that the thread enters a system call:
// the runtime would otherwise hand the thread's P to another thread when
// a call outlasts its monitor's tick (a loopback write runs the peer's
// receive path too), and wake that thread, which costs more here than
// the call itself.

func rawWrite(fd int, b []byte) (int, error) { return rawIO(syscall.SYS_WRITE, fd, b) }

func rawRead(fd int, b []byte) (int, error) { return rawIO(syscall.SYS_READ, fd, b) }

// rawWriteRequest writes p's request on fd: its bytes, or a plain
// request's pieces in one writev (see http_request.go).
func rawWriteRequest(fd int, p *leanProber) (int, error) {
	if p.plain.hostEnd == 0 {
		return rawWrite(fd, p.req)
	}
	ps := p.plain.pieces(p.urlText, p.head)
	var iov [len(ps)]syscall.Iovec
	for i, s := range ps {
		iov[i].Base = unsafe.StringData(s)
		iov[i].SetLen(len(s))
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

// rawIO reads or writes (trap) b on fd, returning -1 and the error when
// the call fails.
func rawIO(trap uintptr, fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := syscall.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

// rawEpollPoll returns the events ready on epfd without waiting.
func rawEpollPoll(epfd int, events []syscall.EpollEvent) (int, error) {
	if len(events) == 0 {
		return 0, nil
	}
	n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// rawCloseReset closes the socket fd with a reset (SO_LINGER 0): the
// close sends RST and returns without waiting for anything.
func rawCloseReset(fd int) {
	l := syscall.Linger{Onoff: 1, Linger: 0}
	_, _, _ = syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, uintptr(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, uintptr(unsafe.Pointer(&l)), unsafe.Sizeof(l), 0)
	rawClose(fd)
}

// rawClose closes fd, a socket of the loop's that no call waits on.
func rawClose(fd int) { _, _, _ = syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0) }

// rawConnect starts connecting the non-blocking socket fd to addr (its
// family's), as syscall.Connect does but with the address on the stack.
func rawConnect(fd int, addr netip.AddrPort) error {
	var (
		ptr  unsafe.Pointer
		size uintptr
		sa4  syscall.RawSockaddrInet4
		sa6  syscall.RawSockaddrInet6
	)
	port := (*[2]byte)(unsafe.Pointer(&sa4.Port))
	if ip := addr.Addr(); ip.Is4() {
		sa4.Family, sa4.Addr = syscall.AF_INET, ip.As4()
		ptr, size = unsafe.Pointer(&sa4), syscall.SizeofSockaddrInet4
	} else {
		sa6.Family, sa6.Addr = syscall.AF_INET6, ip.As16()
		port = (*[2]byte)(unsafe.Pointer(&sa6.Port))
		ptr, size = unsafe.Pointer(&sa6), syscall.SizeofSockaddrInet6
	}
	port[0], port[1] = byte(addr.Port()>>8), byte(addr.Port()) // network order
	_, _, e := syscall.RawSyscall(syscall.SYS_CONNECT, uintptr(fd), uintptr(ptr), size)
	if e != 0 {
		return e
	}
	return nil
}

// rawPeek peeks at one byte of fd without waiting.
func rawPeek(fd int, b []byte) (int, error) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}
