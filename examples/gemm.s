; gemm: C = A @ B with bf16 inputs and f32 accumulation, M = N = K = 256.
;
; Launch: a0 = A (256 x 256 bf16, row-major, 131072 bytes), a1 = B (256 x 256 bf16, row-major,
; 131072 bytes), a2 = C (256 x 256 f32, row-major, 262144 bytes).
;
; Tiles are 128 x 128 (one matrix unit). For each K panel kt (two of them):
;   - DMA the A column panel A[:, 128kt : 128kt+128] (256 rows of 256 bytes, strided in HBM:
;     the DMA descriptor preloaded at SMEM byte 256) and the B row panel
;     B[128kt : 128kt+128, :] (128 rows of 512 bytes, contiguous) into VMEM;
;   - for each N tile nt: load the weights B[kt-panel][:, 128nt : 128nt+128] into mxu0 with
;     `mxu.lw`, then for each M tile mt stream 128 rows of the A panel through it with
;     `mxu.mm` and pop the 128 x 128 f32 results into C's tile (mt, nt) in VMEM: `mxu.pop`
;     for the first K panel, `mxu.pop.acc` (adds into VMEM) for the second.
; Finally C is DMAed from VMEM to HBM.
;
; VMEM layout: A panel at 0 (256 x 128 bf16, rows 256 bytes apart), B panel at 65536
; (128 x 256 bf16, rows 512 bytes apart), C at 131072 (256 x 256 f32, rows 1024 bytes apart).

.program gemm_bf16_256
.source_op "aten::mm"
.arg a buffer
.arg b buffer
.arg c buffer
; DMA descriptor for an A column panel: 1 dimension, 256-byte runs (128 bf16), 256 of them,
; 512 bytes apart in HBM (one A row), 256 bytes apart in VMEM.
.smem 256, 1, 256, 256, 512, 256

    smov s20, 256           ; SMEM address of the A panel descriptor
    smov s21, 0             ; VMEM A panel
    smov s22, 65536         ; VMEM B panel
    smov s23, 131072        ; VMEM C
    smov s24, 65536         ; bytes in each panel
    smov s25, 128           ; tile rows and columns
    smov s26, 256           ; row stride of the A panel in VMEM (bytes)
    smov s27, 512           ; row stride of the B panel in VMEM (bytes)
    smov s28, 1024          ; row stride of C in VMEM (bytes)
    smov s1, 0              ; s1 = kt
kloop:
    mark.begin "load panels"
    sshl s2, s1, 8          ; A panel offset in HBM: kt * 128 * 2 bytes
    sshl s3, s1, 16         ; B panel offset in HBM: kt * 128 rows * 512 bytes
    dma vmem[s21], hbm.a[s2], desc=s20, sem=sem0
    dma vmem[s22], hbm.b[s3], len=s24, sem=sem1
    sem.wait sem0, s24
    sem.wait sem1, s24
    mark.end
    mark.begin "matmul"
    smov s4, 0              ; s4 = nt
nloop:
    sshl s5, s4, 8          ; weights: B panel + nt * 128 * 2 bytes
    sadd s5, s5, s22
    mxu.lw.bf16 mxu0, [s5], rows=s25, cols=s25, stride=s27
    smov s6, 0              ; s6 = mt
mloop:
    sshl s7, s6, 15         ; LHS rows: A panel + mt * 128 rows * 256 bytes
    sadd s7, s7, s21
    mxu.mm.bf16.p1 mxu0, [s7], rows=s25, stride=s26
    sshl s8, s6, 17         ; C tile (mt, nt): C + mt * 128 * 1024 + nt * 128 * 4
    sshl s9, s4, 9
    sadd s8, s8, s9
    sadd s8, s8, s23
    brnz s1, accumulate
    mxu.pop mxu0, [s8], rows=s25, stride=s28
    br popped
accumulate:
    mxu.pop.acc mxu0, [s8], rows=s25, stride=s28
popped:
    sadd s6, s6, 1
    scmp.lt s10, s6, 2
    brnz s10, mloop
    sadd s4, s4, 1
    scmp.lt s10, s4, 2
    brnz s10, nloop
    mark.end
    sadd s1, s1, 1
    scmp.lt s10, s1, 2
    brnz s10, kloop
    mark.begin "store"
    smov s11, 262144        ; bytes of C
    dma hbm.c[s0], vmem[s23], len=s11, sem=sem2
    sem.wait sem2, s11
    mark.end
    halt
