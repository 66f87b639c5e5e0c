; swiglu: out[i] = silu(x[i]) * y[i] = x[i] * sigmoid(x[i]) * y[i] for i < n, in f32: the
; kernel of the custom operator `mylib::fused_swiglu` (see backend/src/ops/custom.rs).
; Any n >= 0 (no multiple-of-1024 requirement).
;
; Launch: a0 = x, a1 = y, a2 = out (buffers of at least 4*n bytes), a3 = n (scalar).
; By the launch convention SMEM word 3 (byte 12) holds n.
;
; The kernel walks the input in chunks of up to 8192 elements (32 KiB): it DMAs a chunk of x and
; of y from HBM to VMEM, waits for both (DMA semaphores count bytes), combines them one vector
; register (8 x 128 = 1024 elements, 4096 bytes) at a time, and DMAs the sum back to HBM.
; The last vector register of a short chunk is masked: elements past the end are neither read
; nor written.
;
; VMEM layout: x chunk at 0, y chunk at 32768, out chunk at 65536.

.program fused_swiglu
.source_op "mylib::fused_swiglu"
.arg x buffer
.arg y buffer
.arg out buffer
.arg n scalar

    sld s1, [12]            ; s1 = n (SMEM word 3)
    smov s2, 0              ; s2 = i, first element of the chunk
    smov s10, 0             ; VMEM address of the x chunk
    smov s11, 32768         ; VMEM address of the y chunk
    smov s12, 65536         ; VMEM address of the out chunk
    viota.flat v0           ; v0[e] = e, 0..1024: for the tail mask
chunk:
    scmp.lt s6, s2, s1      ; while i < n
    brz s6, done
    ssub s3, s1, s2         ; s3 = elements in this chunk = min(n - i, 8192)
    smin s3, s3, 8192
    sshl s4, s3, 2          ; s4 = bytes in this chunk
    sshl s5, s2, 2          ; s5 = byte offset of the chunk in HBM
    mark.begin "load"
    dma vmem[s10], hbm.x[s5], len=s4, sem=sem0
    dma vmem[s11], hbm.y[s5], len=s4, sem=sem1
    sem.wait sem0, s4       ; both copies have landed
    sem.wait sem1, s4
    mark.end
    mark.begin "add"
    smov s7, 0              ; s7 = j, element index in the chunk
    smov s8, 0              ; s8 = 4 * j, byte offset in the chunk
vloop:
    ssub s9, s3, s7         ; elements left in the chunk
    vcmp.lt.i32 m1, v0, s9  ; m1: e < left (all set for a full register)
    vld.w32 v1, [s8], mask=m1
    vld.w32 v2, [s8 + 32768], mask=m1
    vsigmoid.f32 v4, v1      ; sigmoid(x)
    vmul.f32 v4, v4, v1     ; silu(x)
    vmul.f32 v3, v4, v2     ; silu(x) * y
    vst.w32 v3, [s8 + 65536], mask=m1
    sadd s7, s7, 1024
    sadd s8, s8, 4096
    scmp.lt s6, s7, s3
    brnz s6, vloop
    mark.end
    mark.begin "store"
    dma hbm.out[s5], vmem[s12], len=s4, sem=sem2
    sem.wait sem2, s4       ; the out chunk is reused by the next chunk
    mark.end
    sadd s2, s2, s3
    br chunk
done:
    halt
