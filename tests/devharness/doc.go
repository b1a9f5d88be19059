// Package devharness holds the standalone CUDA harness of the device
// library (harness.cu, run.sh): it drives devicesrc/ through the ABI with
// no Go runtime, on a slim kernel set generated into gen/ by the directive
// below, so `go generate ./...` keeps that tree in step with the model and
// the drift check covers it.
package devharness

//go:generate go run ../../cmd/ncclgen generate -out gen -devicesrc ../../../devicesrc -only "AllReduce Sum f32 * *|AllReduce Sum u32 * *|AllReduce PreMulSum f16 * *|AllReduce MinMax i32 * *|AllReduce SumPostDiv u32 * *|AllReduce Prod bf16 * *|AllReduce Sum f8e4m3 * *|AllGather * *|ReduceScatter Sum f32 * *|Broadcast * *|Reduce Sum f32 * *|SendRecv"
