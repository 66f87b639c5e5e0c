; softmax_row: y = softmax(x, dim=-1) for an f32 matrix of `rows` rows of 128 elements.
;
; Launch: a0 = x, a1 = y (buffers of rows * 512 bytes), a2 = rows (scalar, a multiple of 8;
; SMEM word 2).
;
; Each step handles one (8, 128) tile, eight rows in one vector register: DMA it in, take the
; row maximum (vred.max along lanes, broadcast back), subtract, exponentiate, sum along lanes,
; multiply by the reciprocal of the sum, store, DMA it out.
;
; VMEM layout: input tile at 0, output tile at 4096.

.program softmax_row
.source_op "aten::_softmax"
.arg x buffer
.arg y buffer
.arg rows scalar

    sld s1, [8]             ; s1 = rows (SMEM word 2)
    sshl s2, s1, 9          ; s2 = total bytes = rows * 128 * 4
    smov s3, 0              ; s3 = byte offset of the tile
    smov s4, 4096           ; bytes per tile
    smov s5, 0              ; VMEM input tile
    smov s6, 4096           ; VMEM output tile
tile:
    scmp.lt s7, s3, s2
    brz s7, done
    dma vmem[s5], hbm.x[s3], len=s4, sem=sem0
    sem.wait sem0, s4
    mark.begin "softmax"
    vld.w32 v1, [s5]
    vred.max.f32.lane v2, v1    ; row maxima, broadcast along each row
    vsub.f32 v3, v1, v2
    vexp.f32 v3, v3
    vred.add.f32.lane v4, v3    ; row sums
    vrcp.f32 v4, v4
    vmul.f32 v5, v3, v4
    vst.w32 v5, [s6]
    mark.end
    dma hbm.y[s3], vmem[s6], len=s4, sem=sem1
    sem.wait sem1, s4
    sadd s3, s3, s4
    br tile
done:
    halt
