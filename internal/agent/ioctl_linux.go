package agent

import "golang.org/x/sys/unix"

func ioctlGetPgrp(fd int) (int, error) { return unix.IoctlGetInt(fd, unix.TIOCGPGRP) }
