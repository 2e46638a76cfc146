//go:build amd64 && !purego

#include "textflag.h"

// AVX2+FMA and AVX-512 kernels of kernels.go. The AVX2 ones process n
// floats, n a positive multiple of 8: 32 per iteration while at least 32
// remain, then 8; the AVX-512 ones too: 64 per iteration while at least
// 64 remain, then 16, then a last 8 on 256-bit registers. Both do the
// same operations per element in the same order, so they agree bit for
// bit. Loads and stores are
// unaligned (VMOVUPS); Go slices of float32 are 4-aligned.

// func scaleAVX2(dst, x *float32, n int, a float32)
TEXT ·scaleAVX2(SB), NOSPLIT, $0-28
	MOVQ         dst+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS a+24(FP), Y0

scale32:
	CMPQ    CX, $32
	JLT     scale8
	VMULPS  (SI), Y0, Y1
	VMULPS  32(SI), Y0, Y2
	VMULPS  64(SI), Y0, Y3
	VMULPS  96(SI), Y0, Y4
	VMOVUPS Y1, (DI)
	VMOVUPS Y2, 32(DI)
	VMOVUPS Y3, 64(DI)
	VMOVUPS Y4, 96(DI)
	ADDQ    $128, SI
	ADDQ    $128, DI
	SUBQ    $32, CX
	JMP     scale32

scale8:
	TESTQ   CX, CX
	JEQ     scaledone
	VMULPS  (SI), Y0, Y1
	VMOVUPS Y1, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     scale8

scaledone:
	VZEROUPPER
	RET

// func axpyAVX2(dst, x *float32, n int, a float32)
TEXT ·axpyAVX2(SB), NOSPLIT, $0-28
	MOVQ         dst+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS a+24(FP), Y0

axpy32:
	CMPQ        CX, $32
	JLT         axpy8
	VMOVUPS     (SI), Y1
	VMOVUPS     32(SI), Y2
	VMOVUPS     64(SI), Y3
	VMOVUPS     96(SI), Y4
	VFMADD213PS (DI), Y0, Y1   // Y1 = a·x + dst
	VFMADD213PS 32(DI), Y0, Y2
	VFMADD213PS 64(DI), Y0, Y3
	VFMADD213PS 96(DI), Y0, Y4
	VMOVUPS     Y1, (DI)
	VMOVUPS     Y2, 32(DI)
	VMOVUPS     Y3, 64(DI)
	VMOVUPS     Y4, 96(DI)
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         axpy32

axpy8:
	TESTQ       CX, CX
	JEQ         axpydone
	VMOVUPS     (SI), Y1
	VFMADD213PS (DI), Y0, Y1
	VMOVUPS     Y1, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         axpy8

axpydone:
	VZEROUPPER
	RET

// STEP updates 8 floats at offset off: t = m·v + a·g + al·l + b·w; v = t;
// w −= t. DI = w, SI = v, DX = g, R8 = l; Y13 = m, Y14 = a, Y12 = al,
// Y15 = b; W and T are scratch.
#define STEP(off, W, T) \
	VMOVUPS     off(DI), W     \
	VMULPS      off(SI), Y13, T \
	VFMADD231PS off(DX), Y14, T \
	VFMADD231PS off(R8), Y12, T \
	VFMADD231PS W, Y15, T       \
	VMOVUPS     T, off(SI)      \
	VSUBPS      T, W, W         \
	VMOVUPS     W, off(DI)

// func stepAVX2(w, v, grad, l *float32, n int, m, a, al, b float32)
TEXT ·stepAVX2(SB), NOSPLIT, $0-56
	MOVQ         w+0(FP), DI
	MOVQ         v+8(FP), SI
	MOVQ         grad+16(FP), DX
	MOVQ         l+24(FP), R8
	MOVQ         n+32(FP), CX
	VBROADCASTSS m+40(FP), Y13
	VBROADCASTSS a+44(FP), Y14
	VBROADCASTSS al+48(FP), Y12
	VBROADCASTSS b+52(FP), Y15

stepx32:
	CMPQ CX, $32
	JLT  stepx8
	STEP(0, Y0, Y1)
	STEP(32, Y2, Y3)
	STEP(64, Y4, Y5)
	STEP(96, Y6, Y7)
	ADDQ $128, DI
	ADDQ $128, SI
	ADDQ $128, DX
	ADDQ $128, R8
	SUBQ $32, CX
	JMP  stepx32

stepx8:
	TESTQ CX, CX
	JEQ   stepdone
	STEP(0, Y0, Y1)
	ADDQ  $32, DI
	ADDQ  $32, SI
	ADDQ  $32, DX
	ADDQ  $32, R8
	SUBQ  $8, CX
	JMP   stepx8

stepdone:
	VZEROUPPER
	RET

// MAXLANES sets AX to the largest of the eight uint32 lanes of Y1; X2 is
// scratch.
#define MAXLANES \
	VEXTRACTI128 $1, Y1, X2 \
	VPMAXUD      X2, X1, X1 \
	VPSHUFD      $0x4e, X1, X2 \
	VPMAXUD      X2, X1, X1 \
	VPSHUFD      $0xb1, X1, X2 \
	VPMAXUD      X2, X1, X1 \
	VMOVD        X1, AX

// func maxAbsAVX2(x *float32, n int) uint32
// The largest of the per-element bit patterns x & 0x7fffffff (|x| as an
// unsigned integer: finite magnitudes order as their values, +Inf above
// them, NaN above +Inf), per lane over the pass, then across the lanes.
TEXT ·maxAbsAVX2(SB), NOSPLIT, $0-20
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	MOVL         $0x7fffffff, AX
	MOVQ         AX, X0
	VPBROADCASTD X0, Y0
	VPXOR        Y1, Y1, Y1

ma32:
	CMPQ    CX, $32
	JLT     ma8
	VPAND   (SI), Y0, Y2
	VPAND   32(SI), Y0, Y3
	VPAND   64(SI), Y0, Y4
	VPAND   96(SI), Y0, Y5
	VPMAXUD Y2, Y3, Y3
	VPMAXUD Y4, Y5, Y5
	VPMAXUD Y3, Y1, Y1
	VPMAXUD Y5, Y1, Y1
	ADDQ    $128, SI
	SUBQ    $32, CX
	JMP     ma32

ma8:
	TESTQ   CX, CX
	JEQ     madone
	VPAND   (SI), Y0, Y2
	VPMAXUD Y2, Y1, Y1
	ADDQ    $32, SI
	SUBQ    $8, CX
	JMP     ma8

madone:
	MAXLANES
	MOVL AX, ret+16(FP)
	VZEROUPPER
	RET

// func scaleAVX512(dst, x *float32, n int, a float32)
TEXT ·scaleAVX512(SB), NOSPLIT, $0-28
	MOVQ         dst+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS a+24(FP), Z0

zscale64:
	CMPQ    CX, $64
	JLT     zscale16
	VMULPS  (SI), Z0, Z1
	VMULPS  64(SI), Z0, Z2
	VMULPS  128(SI), Z0, Z3
	VMULPS  192(SI), Z0, Z4
	VMOVUPS Z1, (DI)
	VMOVUPS Z2, 64(DI)
	VMOVUPS Z3, 128(DI)
	VMOVUPS Z4, 192(DI)
	ADDQ    $256, SI
	ADDQ    $256, DI
	SUBQ    $64, CX
	JMP     zscale64

zscale16:
	CMPQ    CX, $16
	JLT     zscale8
	VMULPS  (SI), Z0, Z1
	VMOVUPS Z1, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     zscale16

zscale8:
	TESTQ   CX, CX
	JEQ     zscaledone
	VMULPS  (SI), Y0, Y1
	VMOVUPS Y1, (DI)

zscaledone:
	VZEROUPPER
	RET

// func axpyAVX512(dst, x *float32, n int, a float32)
TEXT ·axpyAVX512(SB), NOSPLIT, $0-28
	MOVQ         dst+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS a+24(FP), Z0

zaxpy64:
	CMPQ        CX, $64
	JLT         zaxpy16
	VMOVUPS     (SI), Z1
	VMOVUPS     64(SI), Z2
	VMOVUPS     128(SI), Z3
	VMOVUPS     192(SI), Z4
	VFMADD213PS (DI), Z0, Z1 // Z1 = a·x + dst
	VFMADD213PS 64(DI), Z0, Z2
	VFMADD213PS 128(DI), Z0, Z3
	VFMADD213PS 192(DI), Z0, Z4
	VMOVUPS     Z1, (DI)
	VMOVUPS     Z2, 64(DI)
	VMOVUPS     Z3, 128(DI)
	VMOVUPS     Z4, 192(DI)
	ADDQ        $256, SI
	ADDQ        $256, DI
	SUBQ        $64, CX
	JMP         zaxpy64

zaxpy16:
	CMPQ        CX, $16
	JLT         zaxpy8
	VMOVUPS     (SI), Z1
	VFMADD213PS (DI), Z0, Z1
	VMOVUPS     Z1, (DI)
	ADDQ        $64, SI
	ADDQ        $64, DI
	SUBQ        $16, CX
	JMP         zaxpy16

zaxpy8:
	TESTQ       CX, CX
	JEQ         zaxpydone
	VMOVUPS     (SI), Y1
	VFMADD213PS (DI), Y0, Y1
	VMOVUPS     Y1, (DI)

zaxpydone:
	VZEROUPPER
	RET

// ZSTEP is STEP on 16 floats: Z13 = m, Z14 = a, Z12 = al, Z15 = b.
#define ZSTEP(off, W, T) \
	VMOVUPS     off(DI), W     \
	VMULPS      off(SI), Z13, T \
	VFMADD231PS off(DX), Z14, T \
	VFMADD231PS off(R8), Z12, T \
	VFMADD231PS W, Z15, T       \
	VMOVUPS     T, off(SI)      \
	VSUBPS      T, W, W         \
	VMOVUPS     W, off(DI)

// func stepAVX512(w, v, grad, l *float32, n int, m, a, al, b float32)
TEXT ·stepAVX512(SB), NOSPLIT, $0-56
	MOVQ         w+0(FP), DI
	MOVQ         v+8(FP), SI
	MOVQ         grad+16(FP), DX
	MOVQ         l+24(FP), R8
	MOVQ         n+32(FP), CX
	VBROADCASTSS m+40(FP), Z13
	VBROADCASTSS a+44(FP), Z14
	VBROADCASTSS al+48(FP), Z12
	VBROADCASTSS b+52(FP), Z15

zstep64:
	CMPQ CX, $64
	JLT  zstep16
	ZSTEP(0, Z0, Z1)
	ZSTEP(64, Z2, Z3)
	ZSTEP(128, Z4, Z5)
	ZSTEP(192, Z6, Z7)
	ADDQ $256, DI
	ADDQ $256, SI
	ADDQ $256, DX
	ADDQ $256, R8
	SUBQ $64, CX
	JMP  zstep64

zstep16:
	CMPQ  CX, $16
	JLT   zstep8
	ZSTEP(0, Z0, Z1)
	ADDQ  $64, DI
	ADDQ  $64, SI
	ADDQ  $64, DX
	ADDQ  $64, R8
	SUBQ  $16, CX
	JMP   zstep16

zstep8:
	TESTQ CX, CX
	JEQ   zstepdone
	STEP(0, Y0, Y1)

zstepdone:
	VZEROUPPER
	RET

// func maxAbsAVX512(x *float32, n int) uint32
// maxAbsAVX2 on 512-bit registers, reduced to 256 bits at the end.
TEXT ·maxAbsAVX512(SB), NOSPLIT, $0-20
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	MOVL         $0x7fffffff, AX
	VPBROADCASTD AX, Z0
	VPXORD       Z1, Z1, Z1

zma64:
	CMPQ    CX, $64
	JLT     zma16
	VPANDD  (SI), Z0, Z2
	VPANDD  64(SI), Z0, Z3
	VPANDD  128(SI), Z0, Z4
	VPANDD  192(SI), Z0, Z5
	VPMAXUD Z2, Z3, Z3
	VPMAXUD Z4, Z5, Z5
	VPMAXUD Z3, Z1, Z1
	VPMAXUD Z5, Z1, Z1
	ADDQ    $256, SI
	SUBQ    $64, CX
	JMP     zma64

zma16:
	CMPQ    CX, $16
	JLT     zma8
	VPANDD  (SI), Z0, Z2
	VPMAXUD Z2, Z1, Z1
	ADDQ    $64, SI
	SUBQ    $16, CX
	JMP     zma16

zma8:
	VEXTRACTI64X4 $1, Z1, Y2
	VPMAXUD       Y2, Y1, Y1
	TESTQ         CX, CX
	JEQ           zmadone
	VPAND         (SI), Y0, Y2
	VPMAXUD       Y2, Y1, Y1

zmadone:
	MAXLANES
	MOVL AX, ret+16(FP)
	VZEROUPPER
	RET
