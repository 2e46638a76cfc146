//go:build amd64 && !purego

#include "textflag.h"

// AVX2 (+F16C for fp16) and AVX-512 (F, BW) kernels of the codecs'
// element-wise passes; see kernels_amd64.go for what each computes.
// Conversions process n elements, n a positive multiple of 16 (AVX2) or
// 32 (AVX-512); the byte-plane kernels n elements, n a positive multiple
// of 32 (AVX2) or 64 (AVX-512). Loads and stores are unaligned. Every
// kernel gives the same bits as the Go loop it replaces.

// Within each 128-bit lane, bytes 0,4,8,12, 1,5,9,13, 2,6,10,14, 3,7,11,15:
// four elements' bytes grouped by plane (a 4×4 byte transpose, its own
// inverse).
DATA planeBytes<>+0x00(SB)/8, $0x0d0905010c080400
DATA planeBytes<>+0x08(SB)/8, $0x0f0b07030e0a0602
DATA planeBytes<>+0x10(SB)/8, $0x0d0905010c080400
DATA planeBytes<>+0x18(SB)/8, $0x0f0b07030e0a0602
GLOBL planeBytes<>(SB), RODATA|NOPTR, $32

// VPERMD indices 0,4,1,5,2,6,3,7: after planeBytes, qword p holds plane p
// of the register's 8 elements.
DATA planeDwords<>+0x00(SB)/8, $0x0000000400000000
DATA planeDwords<>+0x08(SB)/8, $0x0000000500000001
DATA planeDwords<>+0x10(SB)/8, $0x0000000600000002
DATA planeDwords<>+0x18(SB)/8, $0x0000000700000003
GLOBL planeDwords<>(SB), RODATA|NOPTR, $32

// VPERMD indices 0,2,4,6,1,3,5,7: the inverse of planeDwords.
DATA elemDwords<>+0x00(SB)/8, $0x0000000200000000
DATA elemDwords<>+0x08(SB)/8, $0x0000000600000004
DATA elemDwords<>+0x10(SB)/8, $0x0000000300000001
DATA elemDwords<>+0x18(SB)/8, $0x0000000700000005
GLOBL elemDwords<>(SB), RODATA|NOPTR, $32

// BROADCAST32 fills ymm register y with the 32-bit constant c.
#define BROADCAST32(c, y, x) MOVL $c, AX; VMOVD AX, x; VPBROADCASTD x, y

// func f32ToF16AVX2(dst *uint16, src *float32, n int)
// VCVTPS2PH with imm8 0 rounds to nearest even whatever MXCSR says. NaN
// becomes quiet with the top 9 payload bits kept, as in f32ToF16.
TEXT ·f32ToF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

f16enc:
	VMOVUPS   (SI), Y0
	VMOVUPS   32(SI), Y1
	VCVTPS2PH $0, Y0, (DI)
	VCVTPS2PH $0, Y1, 16(DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	SUBQ      $16, CX
	JNZ       f16enc
	VZEROUPPER
	RET

// func f16ToF32AVX2(dst *float32, src *uint16, n int)
// VCVTPH2PS is exact except that it quiets signalling NaNs; lanes whose
// input has an all-ones exponent and a clear quiet bit (signalling NaN or
// Inf, whose exact widening has bit 22 clear) get bit 22 cleared again.
TEXT ·f16ToF32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	BROADCAST32(0x7e00, Y13, X13)
	BROADCAST32(0x7c00, Y14, X14)
	BROADCAST32(0x00400000, Y15, X15)

f16dec:
	VCVTPH2PS (SI), Y0
	VCVTPH2PS 16(SI), Y1
	VPMOVZXWD (SI), Y2
	VPMOVZXWD 16(SI), Y3
	VPAND     Y13, Y2, Y2
	VPAND     Y13, Y3, Y3
	VPCMPEQD  Y14, Y2, Y2
	VPCMPEQD  Y14, Y3, Y3
	VPAND     Y15, Y2, Y2
	VPAND     Y15, Y3, Y3
	VPANDN    Y0, Y2, Y0 // Y0 &^ Y2
	VPANDN    Y1, Y3, Y1
	VMOVUPS   Y0, (DI)
	VMOVUPS   Y1, 32(DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JNZ       f16dec
	VZEROUPPER
	RET

// BF16ROUND sets y to the bf16 code of the float32 bits in y, in the low
// half of each dword: f32ToBF16 step by step (t0 = b>>16, t1 = its lowest
// bit, t2 = the rounded code, t0|0x40 the quiet NaN, t3 = |b| > Inf), with
// Y10..Y14 holding 1, 0x7fff, 0x7fffffff, 0x7f800000, 0x40.
#define BF16ROUND(y, t0, t1, t2, t3) \
	VPSRLD    $16, y, t0;  \
	VPAND     Y10, t0, t1; \
	VPADDD    Y11, y, t2;  \
	VPADDD    t1, t2, t2;  \
	VPSRLD    $16, t2, t2; \
	VPOR      Y14, t0, t0; \
	VPAND     Y12, y, t3;  \
	VPCMPGTD  Y13, t3, t3; \
	VPBLENDVB t3, t0, t2, y

// func f32ToBF16AVX2(dst *uint16, src *float32, n int)
TEXT ·f32ToBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	BROADCAST32(1, Y10, X10)
	BROADCAST32(0x7fff, Y11, X11)
	BROADCAST32(0x7fffffff, Y12, X12)
	BROADCAST32(0x7f800000, Y13, X13)
	BROADCAST32(0x40, Y14, X14)

bf16enc:
	VMOVDQU   (SI), Y0
	VMOVDQU   32(SI), Y1
	BF16ROUND(Y0, Y2, Y3, Y4, Y5)
	BF16ROUND(Y1, Y6, Y7, Y8, Y9)
	VPACKUSDW Y1, Y0, Y0     // codes 0-3, 8-11 | 4-7, 12-15
	VPERMQ    $0xd8, Y0, Y0  // 0-3, 4-7, 8-11, 12-15
	VMOVDQU   Y0, (DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	SUBQ      $16, CX
	JNZ       bf16enc
	VZEROUPPER
	RET

// func bf16ToF32AVX2(dst *float32, src *uint16, n int)
TEXT ·bf16ToF32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

bf16dec:
	VPMOVZXWD (SI), Y0
	VPMOVZXWD 16(SI), Y1
	VPSLLD    $16, Y0, Y0
	VPSLLD    $16, Y1, Y1
	VMOVDQU   Y0, (DI)
	VMOVDQU   Y1, 32(DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JNZ       bf16dec
	VZEROUPPER
	RET

// func shuffleAVX2(planes, raw *byte, stride, n int)
// 32 elements (128 bytes of raw) per iteration: each register of 8
// elements is regrouped to one qword per plane, then a 4×4 qword transpose
// of the four registers gives 32 bytes of each plane.
TEXT ·shuffleAVX2(SB), NOSPLIT, $0-32
	MOVQ    planes+0(FP), DI
	MOVQ    raw+8(FP), SI
	MOVQ    stride+16(FP), DX
	MOVQ    n+24(FP), CX
	LEAQ    (DI)(DX*2), R8 // plane 2
	VMOVDQU planeBytes<>(SB), Y14
	VMOVDQU planeDwords<>(SB), Y15

shuf:
	VMOVDQU     (SI), Y0
	VMOVDQU     32(SI), Y1
	VMOVDQU     64(SI), Y2
	VMOVDQU     96(SI), Y3
	VPSHUFB     Y14, Y0, Y0
	VPSHUFB     Y14, Y1, Y1
	VPSHUFB     Y14, Y2, Y2
	VPSHUFB     Y14, Y3, Y3
	VPERMD      Y0, Y15, Y0
	VPERMD      Y1, Y15, Y1
	VPERMD      Y2, Y15, Y2
	VPERMD      Y3, Y15, Y3
	VPUNPCKLQDQ Y1, Y0, Y4         // planes 0 | 2 of elements 0-15
	VPUNPCKHQDQ Y1, Y0, Y5         // planes 1 | 3 of elements 0-15
	VPUNPCKLQDQ Y3, Y2, Y6         // planes 0 | 2 of elements 16-31
	VPUNPCKHQDQ Y3, Y2, Y7         // planes 1 | 3 of elements 16-31
	VPERM2I128  $0x20, Y6, Y4, Y0
	VPERM2I128  $0x20, Y7, Y5, Y1
	VPERM2I128  $0x31, Y6, Y4, Y2
	VPERM2I128  $0x31, Y7, Y5, Y3
	VMOVDQU     Y0, (DI)
	VMOVDQU     Y1, (DI)(DX*1)
	VMOVDQU     Y2, (R8)
	VMOVDQU     Y3, (R8)(DX*1)
	ADDQ        $128, SI
	ADDQ        $32, DI
	ADDQ        $32, R8
	SUBQ        $32, CX
	JNZ         shuf
	VZEROUPPER
	RET

// func unshuffleAVX2(raw, planes *byte, stride, n int)
// The steps of shuffleAVX2 inverted, in reverse order.
TEXT ·unshuffleAVX2(SB), NOSPLIT, $0-32
	MOVQ    raw+0(FP), DI
	MOVQ    planes+8(FP), SI
	MOVQ    stride+16(FP), DX
	MOVQ    n+24(FP), CX
	LEAQ    (SI)(DX*2), R8 // plane 2
	VMOVDQU planeBytes<>(SB), Y14
	VMOVDQU elemDwords<>(SB), Y15

unshuf:
	VMOVDQU     (SI), Y0
	VMOVDQU     (SI)(DX*1), Y1
	VMOVDQU     (R8), Y2
	VMOVDQU     (R8)(DX*1), Y3
	VPERM2I128  $0x20, Y2, Y0, Y4
	VPERM2I128  $0x20, Y3, Y1, Y5
	VPERM2I128  $0x31, Y2, Y0, Y6
	VPERM2I128  $0x31, Y3, Y1, Y7
	VPUNPCKLQDQ Y5, Y4, Y0
	VPUNPCKHQDQ Y5, Y4, Y1
	VPUNPCKLQDQ Y7, Y6, Y2
	VPUNPCKHQDQ Y7, Y6, Y3
	VPERMD      Y0, Y15, Y0
	VPERMD      Y1, Y15, Y1
	VPERMD      Y2, Y15, Y2
	VPERMD      Y3, Y15, Y3
	VPSHUFB     Y14, Y0, Y0
	VPSHUFB     Y14, Y1, Y1
	VPSHUFB     Y14, Y2, Y2
	VPSHUFB     Y14, Y3, Y3
	VMOVDQU     Y0, (DI)
	VMOVDQU     Y1, 32(DI)
	VMOVDQU     Y2, 64(DI)
	VMOVDQU     Y3, 96(DI)
	ADDQ        $32, SI
	ADDQ        $32, R8
	ADDQ        $128, DI
	SUBQ        $32, CX
	JNZ         unshuf
	VZEROUPPER
	RET

// VPERMD indices 0,4,8,12, 1,5,9,13, 2,6,10,14, 3,7,11,15: after
// planeBytes in every 128-bit lane, lane p of the register holds plane p
// of its 16 elements. The permutation is its own inverse.
DATA planeLanes<>+0x00(SB)/8, $0x0000000400000000
DATA planeLanes<>+0x08(SB)/8, $0x0000000c00000008
DATA planeLanes<>+0x10(SB)/8, $0x0000000500000001
DATA planeLanes<>+0x18(SB)/8, $0x0000000d00000009
DATA planeLanes<>+0x20(SB)/8, $0x0000000600000002
DATA planeLanes<>+0x28(SB)/8, $0x0000000e0000000a
DATA planeLanes<>+0x30(SB)/8, $0x0000000700000003
DATA planeLanes<>+0x38(SB)/8, $0x0000000f0000000b
GLOBL planeLanes<>(SB), RODATA|NOPTR, $64

// BROADCAST32Z fills zmm register z with the 32-bit constant c.
#define BROADCAST32Z(c, z) MOVL $c, AX; VPBROADCASTD AX, z

// func f16ToF32AVX512(dst *float32, src *uint16, n int)
// As f16ToF32AVX2: lanes with an all-ones exponent and a clear quiet bit
// get bit 22 cleared again (Z15 = ^bit 22, applied under mask).
TEXT ·f16ToF32AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	BROADCAST32Z(0x7e00, Z13)
	BROADCAST32Z(0x7c00, Z14)
	BROADCAST32Z(0xffbfffff, Z15)

zf16dec:
	VCVTPH2PS (SI), Z0
	VCVTPH2PS 32(SI), Z1
	VPMOVZXWD (SI), Z2
	VPMOVZXWD 32(SI), Z3
	VPANDD    Z13, Z2, Z2
	VPANDD    Z13, Z3, Z3
	VPCMPEQD  Z14, Z2, K1
	VPCMPEQD  Z14, Z3, K2
	VPANDD    Z15, Z0, K1, Z0
	VPANDD    Z15, Z1, K2, Z1
	VMOVUPS   Z0, (DI)
	VMOVUPS   Z1, 64(DI)
	ADDQ      $64, SI
	ADDQ      $128, DI
	SUBQ      $32, CX
	JNZ       zf16dec
	VZEROUPPER
	RET

// ZBF16 stores at dst the 16 bf16 codes of the float32 bits in z: as
// BF16ROUND (t0 = b>>16, t1 = its lowest bit, t2 = the rounded code, the
// quiet NaN t0|0x40 selected under the mask k of |b| > Inf), then a
// truncating narrowing to 16 bits. Z10..Z14 hold 1, 0x7fff, 0x7fffffff,
// 0x7f800000, 0x40.
#define ZBF16(z, t0, t1, t2, k, dst) \
	VPSRLD    $16, z, t0;  \
	VPANDD    Z10, t0, t1; \
	VPADDD    Z11, z, t2;  \
	VPADDD    t1, t2, t2;  \
	VPSRLD    $16, t2, t2; \
	VPORD     Z14, t0, t0; \
	VPANDD    Z12, z, t1;  \
	VPCMPGTD  Z13, t1, k;  \
	VMOVDQA32 t0, k, t2;   \
	VPMOVDW   t2, dst

// func f32ToBF16AVX512(dst *uint16, src *float32, n int)
TEXT ·f32ToBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	BROADCAST32Z(1, Z10)
	BROADCAST32Z(0x7fff, Z11)
	BROADCAST32Z(0x7fffffff, Z12)
	BROADCAST32Z(0x7f800000, Z13)
	BROADCAST32Z(0x40, Z14)

zbf16enc:
	VMOVDQU32 (SI), Z0
	VMOVDQU32 64(SI), Z1
	ZBF16(Z0, Z2, Z3, Z4, K1, (DI))
	ZBF16(Z1, Z5, Z6, Z7, K2, 32(DI))
	ADDQ      $128, SI
	ADDQ      $64, DI
	SUBQ      $32, CX
	JNZ       zbf16enc
	VZEROUPPER
	RET

// func bf16ToF32AVX512(dst *float32, src *uint16, n int)
TEXT ·bf16ToF32AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

zbf16dec:
	VPMOVZXWD (SI), Z0
	VPMOVZXWD 32(SI), Z1
	VPSLLD    $16, Z0, Z0
	VPSLLD    $16, Z1, Z1
	VMOVDQU32 Z0, (DI)
	VMOVDQU32 Z1, 64(DI)
	ADDQ      $64, SI
	ADDQ      $128, DI
	SUBQ      $32, CX
	JNZ       zbf16dec
	VZEROUPPER
	RET

// PLANES4 transposes the 128-bit lanes of Z0..Z3 (a 4 x 4 matrix of
// lanes, its own inverse): afterwards Zp holds lane p of the old Z0, Z1,
// Z2, Z3. Z4..Z7 are scratch.
#define PLANES4 \
	VSHUFI64X2 $0x44, Z1, Z0, Z4; \
	VSHUFI64X2 $0xee, Z1, Z0, Z5; \
	VSHUFI64X2 $0x44, Z3, Z2, Z6; \
	VSHUFI64X2 $0xee, Z3, Z2, Z7; \
	VSHUFI64X2 $0x88, Z6, Z4, Z0; \
	VSHUFI64X2 $0xdd, Z6, Z4, Z1; \
	VSHUFI64X2 $0x88, Z7, Z5, Z2; \
	VSHUFI64X2 $0xdd, Z7, Z5, Z3

// func shuffleAVX512(planes, raw *byte, stride, n int)
// 64 elements (256 bytes of raw) per iteration: in each register of 16
// elements, bytes grouped by plane within each 128-bit lane (planeBytes),
// then dwords so that lane p holds plane p (planeLanes), then the 4 x 4
// transpose of lanes gives 64 bytes of each plane.
TEXT ·shuffleAVX512(SB), NOSPLIT, $0-32
	MOVQ           planes+0(FP), DI
	MOVQ           raw+8(FP), SI
	MOVQ           stride+16(FP), DX
	MOVQ           n+24(FP), CX
	LEAQ           (DI)(DX*2), R8 // plane 2
	VBROADCASTI32X4 planeBytes<>(SB), Z14
	VMOVDQU32      planeLanes<>(SB), Z15

zshuf:
	VMOVDQU32 (SI), Z0
	VMOVDQU32 64(SI), Z1
	VMOVDQU32 128(SI), Z2
	VMOVDQU32 192(SI), Z3
	VPSHUFB   Z14, Z0, Z0
	VPSHUFB   Z14, Z1, Z1
	VPSHUFB   Z14, Z2, Z2
	VPSHUFB   Z14, Z3, Z3
	VPERMD    Z0, Z15, Z0
	VPERMD    Z1, Z15, Z1
	VPERMD    Z2, Z15, Z2
	VPERMD    Z3, Z15, Z3
	PLANES4
	VMOVDQU32 Z0, (DI)
	VMOVDQU32 Z1, (DI)(DX*1)
	VMOVDQU32 Z2, (R8)
	VMOVDQU32 Z3, (R8)(DX*1)
	ADDQ      $256, SI
	ADDQ      $64, DI
	ADDQ      $64, R8
	SUBQ      $64, CX
	JNZ       zshuf
	VZEROUPPER
	RET

// func unshuffleAVX512(raw, planes *byte, stride, n int)
// The steps of shuffleAVX512 inverted, in reverse order (each is its own
// inverse).
TEXT ·unshuffleAVX512(SB), NOSPLIT, $0-32
	MOVQ           raw+0(FP), DI
	MOVQ           planes+8(FP), SI
	MOVQ           stride+16(FP), DX
	MOVQ           n+24(FP), CX
	LEAQ           (SI)(DX*2), R8 // plane 2
	VBROADCASTI32X4 planeBytes<>(SB), Z14
	VMOVDQU32      planeLanes<>(SB), Z15

zunshuf:
	VMOVDQU32 (SI), Z0
	VMOVDQU32 (SI)(DX*1), Z1
	VMOVDQU32 (R8), Z2
	VMOVDQU32 (R8)(DX*1), Z3
	PLANES4
	VPERMD    Z0, Z15, Z0
	VPERMD    Z1, Z15, Z1
	VPERMD    Z2, Z15, Z2
	VPERMD    Z3, Z15, Z3
	VPSHUFB   Z14, Z0, Z0
	VPSHUFB   Z14, Z1, Z1
	VPSHUFB   Z14, Z2, Z2
	VPSHUFB   Z14, Z3, Z3
	VMOVDQU32 Z0, (DI)
	VMOVDQU32 Z1, 64(DI)
	VMOVDQU32 Z2, 128(DI)
	VMOVDQU32 Z3, 192(DI)
	ADDQ      $64, SI
	ADDQ      $64, R8
	ADDQ      $256, DI
	SUBQ      $64, CX
	JNZ       zunshuf
	VZEROUPPER
	RET
