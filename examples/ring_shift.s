; ring_shift: every chip sends its buffer x to buffer y of the next chip in a ring
; (chip c -> chip (c + 1) mod nchips), with one remote DMA. Run it on every chip of a launch.
;
; Launch: a0 = x, a1 = y, buffers of the same length on every chip. By the launch convention
; SMEM word 0 holds x's length in bytes.
;
; The local semaphore sem0 counts the bytes sent; the receiving chip's sem1 counts the bytes
; it received, so each chip waits for both its send and its receive before it ends.

.program ring_shift
.arg x buffer
.arg y buffer

    ssys s1, chip           ; this chip
    ssys s2, nchips
    sadd s4, s1, 1
    sremu s4, s4, s2        ; s4 = next chip in the ring
    sld s3, [0]             ; s3 = bytes of x
    mark.begin "shift"
    dma hbm.y[s0], hbm.x[s0], len=s3, sem=sem0, remote=s4, rsem=sem1
    sem.wait sem0, s3       ; sent
    sem.wait sem1, s3       ; received from the previous chip
    mark.end
    halt
