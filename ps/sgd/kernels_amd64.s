//go:build amd64 && !purego

#include "textflag.h"

// AVX2+FMA kernels of kernels.go. Each processes n floats, n a positive
// multiple of 8: 32 per iteration while at least 32 remain, then 8. Loads
// and stores are unaligned (VMOVUPS); Go slices of float32 are 4-aligned.

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

// func nonFiniteAVX2(x *float32, n int) bool
// An element is NaN or ±Inf iff its exponent bits are all ones; the OR of
// the per-lane (x & 0x7f800000) == 0x7f800000 masks is tested at the end.
TEXT ·nonFiniteAVX2(SB), NOSPLIT, $0-17
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	MOVL         $0x7f800000, AX
	MOVQ         AX, X0
	VPBROADCASTD X0, Y0
	VPXOR        Y1, Y1, Y1

nf32:
	CMPQ     CX, $32
	JLT      nf8
	VPAND    (SI), Y0, Y2
	VPAND    32(SI), Y0, Y3
	VPAND    64(SI), Y0, Y4
	VPAND    96(SI), Y0, Y5
	VPCMPEQD Y0, Y2, Y2
	VPCMPEQD Y0, Y3, Y3
	VPCMPEQD Y0, Y4, Y4
	VPCMPEQD Y0, Y5, Y5
	VPOR     Y2, Y3, Y3
	VPOR     Y4, Y5, Y5
	VPOR     Y3, Y1, Y1
	VPOR     Y5, Y1, Y1
	ADDQ     $128, SI
	SUBQ     $32, CX
	JMP      nf32

nf8:
	TESTQ    CX, CX
	JEQ      nfdone
	VPAND    (SI), Y0, Y2
	VPCMPEQD Y0, Y2, Y2
	VPOR     Y2, Y1, Y1
	ADDQ     $32, SI
	SUBQ     $8, CX
	JMP      nf8

nfdone:
	VPTEST     Y1, Y1
	SETNE      ret+16(FP)
	VZEROUPPER
	RET
