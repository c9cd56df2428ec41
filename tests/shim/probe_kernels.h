// probe_kernels.h: the kernels of tests/shim/cuda_probe.cc, as PTX text for cuModuleLoadData.
//
// PTX ISA 7.0 for sm_52, so that any driver of CUDA 11.0 or later JIT-compiles it for whatever GPU
// it runs on. Each kernel is meant to be launched with one block of one thread:
//   * gpuslice_sleep(u64 ns): spins on %globaltimer until `ns` nanoseconds have passed;
//   * gpuslice_work(u64 iterations): a dependent chain of one 32-bit multiply-add per iteration
//     (a linear congruential step), stored into the module's global `gpuslice_sink` at the end so
//     that ptxas cannot drop the loop;
//   * gpuslice_noop(): returns.
// The test CUDA library (src/shim/fake_cuda) ignores the text and knows the three names.
#pragma once

namespace gpuslice::probe {

inline constexpr char kProbePtx[] = R"PTX(
.version 7.0
.target sm_52
.address_size 64

.visible .global .align 4 .u32 gpuslice_sink;

.visible .entry gpuslice_sleep(
	.param .u64 gpuslice_sleep_ns
)
{
	.reg .pred 	%p<2>;
	.reg .b64 	%rd<6>;

	ld.param.u64 	%rd1, [gpuslice_sleep_ns];
	mov.u64 	%rd2, %globaltimer;
SLEEP_LOOP:
	mov.u64 	%rd3, %globaltimer;
	sub.u64 	%rd4, %rd3, %rd2;
	setp.lt.u64 	%p1, %rd4, %rd1;
	@%p1 bra 	SLEEP_LOOP;
	ret;
}

.visible .entry gpuslice_work(
	.param .u64 gpuslice_work_iterations
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<3>;

	ld.param.u64 	%rd1, [gpuslice_work_iterations];
	mov.u32 	%r1, 1;
	mov.u64 	%rd2, 0;
	setp.eq.u64 	%p1, %rd1, 0;
	@%p1 bra 	WORK_DONE;
WORK_LOOP:
	mad.lo.u32 	%r1, %r1, 1664525, 1013904223;
	add.u64 	%rd2, %rd2, 1;
	setp.lt.u64 	%p1, %rd2, %rd1;
	@%p1 bra 	WORK_LOOP;
WORK_DONE:
	st.global.u32 	[gpuslice_sink], %r1;
	ret;
}

.visible .entry gpuslice_noop()
{
	ret;
}
)PTX";

}  // namespace gpuslice::probe
