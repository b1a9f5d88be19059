package ncclgo

import (
	"github.com/ncclgo/ncclgo/internal/hostcomm"
	"github.com/ncclgo/ncclgo/runtime/comm"
)

func init() { hostcomm.Wrap = func(e *comm.Engine) any { return newComm(e) } }
