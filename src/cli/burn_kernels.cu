// Kernels of `gpuslice burn`, compiled to PTX at build time and embedded. The same PTX runs
// on a real GPU (JIT-compiled by the driver) and on the simulator (which knows
// gpuslice_spin by name and charges its parameter in nanoseconds per wave of blocks).

// Every thread spins on the GPU's nanosecond global timer for `ns`.
extern "C" __global__ void gpuslice_spin(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
