#include "textflag.h"

// Folding constants, each 128-bit pair (lo, hi) = bit-reflected
// (x^(D+32) mod P, x^(D-32) mod P) << 1 for fold distance D bits.

// D = 2048: four 512-bit accumulators, 256 bytes per step.
DATA k2048<>+0(SB)/8, $0x011542778a
DATA k2048<>+8(SB)/8, $0x01322d1430
GLOBL k2048<>(SB), RODATA, $16

// D = 4096: eight 512-bit accumulators, 512 bytes per step.
DATA k4096<>+0(SB)/8, $0x001072db28
DATA k4096<>+8(SB)/8, $0x01d741f35c
GLOBL k4096<>(SB), RODATA, $16

// D = 512: one accumulator into the next, or one 64-byte step.
DATA k512<>+0(SB)/8, $0x0154442bd4
DATA k512<>+8(SB)/8, $0x01c6e41596
GLOBL k512<>(SB), RODATA, $16

// Lanes 0, 1 and 2 of the last accumulator fold by 384, 256 and 128 bits
// into lane 3, which stays as it is.
DATA klanes<>+0(SB)/8, $0x003db1ecdc
DATA klanes<>+8(SB)/8, $0x0174359406
DATA klanes<>+16(SB)/8, $0x00f1da05aa
DATA klanes<>+24(SB)/8, $0x015a546366
DATA klanes<>+32(SB)/8, $0x01751997d0
DATA klanes<>+40(SB)/8, $0x00ccaa009e
DATA klanes<>+48(SB)/8, $0
DATA klanes<>+56(SB)/8, $0
GLOBL klanes<>(SB), RODATA, $64

// D = 128: one 16-byte step.
DATA k128<>+0(SB)/8, $0x01751997d0
DATA k128<>+8(SB)/8, $0x00ccaa009e
GLOBL k128<>(SB), RODATA, $16

// The final reduction of the 128-bit remainder R to the 32-bit register:
// kred = (x^96 mod P, x^64 mod P) as the folds' constants are; kbar =
// (floor(x^64 / P), P), each 33 bits, bit-reflected; kmask32 keeps the
// low 32 bits of a register.
DATA kred<>+0(SB)/8, $0x00ccaa009e
DATA kred<>+8(SB)/8, $0x0163cd6124
GLOBL kred<>(SB), RODATA, $16

DATA kbar<>+0(SB)/8, $0x01f7011641
DATA kbar<>+8(SB)/8, $0x01db710641
GLOBL kbar<>(SB), RODATA, $16

DATA kmask32<>+0(SB)/8, $0x00ffffffff
DATA kmask32<>+8(SB)/8, $0
GLOBL kmask32<>(SB), RODATA, $16

// FOLD folds acc forward by the distance of the constant pair in k and
// XORs in src (memory or a register): acc = lo(acc)*k.lo ^ hi(acc)*k.hi ^ src.
// tmp is clobbered. The same for xmm, ymm and zmm operands.
#define FOLD(k, acc, tmp, src) \
	VPCLMULQDQ $0x00, k, acc, tmp; \
	VPCLMULQDQ $0x11, k, acc, acc; \
	VPTERNLOGD $0x96, src, tmp, acc

// REDUCE reduces X4, the 128-bit remainder R (lane 0 low), to the 32-bit
// register, in AX; X5-X9 are clobbered. 128 to 96 bits: A = R.lo * x^96 ^
// R.hi. 96 to 64: B = (A mod x^32) * x^64 ^ A >> 32. Then the Barrett
// reduction of B by P: the register is the second 32 bits of
// B ^ ((((B mod x^32) * mu) mod x^32) * P).
#define REDUCE \
	VMOVDQU64  kred<>(SB), X8; \
	VMOVDQU64  kmask32<>(SB), X9; \
	VPCLMULQDQ $0x00, X8, X4, X5; \
	VPSRLDQ    $8, X4, X4; \
	VPXORQ     X4, X5, X5; \
	VPANDQ     X9, X5, X6; \
	VPSRLDQ    $4, X5, X5; \
	VPCLMULQDQ $0x10, X8, X6, X6; \
	VPXORQ     X5, X6, X6; \
	VMOVDQU64  kbar<>(SB), X8; \
	VPANDQ     X9, X6, X7; \
	VPCLMULQDQ $0x00, X8, X7, X7; \
	VPANDQ     X9, X7, X7; \
	VPCLMULQDQ $0x10, X8, X7, X7; \
	VPXORQ     X6, X7, X7; \
	VPEXTRD    $1, X7, AX

// EIGHTTOFOUR folds Z0-Z3 2048 bits on, into Z4-Z7, leaving the sums in
// Z0-Z3 and k2048 in Z8 (for the 256-byte steps that follow).
#define EIGHTTOFOUR \
	VBROADCASTI32X4 k2048<>(SB), Z8; \
	FOLD(Z8, Z0, Z16, Z4); \
	FOLD(Z8, Z1, Z17, Z5); \
	FOLD(Z8, Z2, Z18, Z6); \
	FOLD(Z8, Z3, Z19, Z7)

// FOURTOONE folds Z0 on into Z1, that into Z2, that into Z3 (each 512
// bits on), leaving the sum in Z0 and k512 in Z8 (for the 64-byte steps).
#define FOURTOONE \
	VBROADCASTI32X4 k512<>(SB), Z8; \
	FOLD(Z8, Z0, Z4, Z1); \
	FOLD(Z8, Z0, Z4, Z2); \
	FOLD(Z8, Z0, Z4, Z3)

// LANES folds Z0's lanes 0-2 by 384, 256 and 128 bits into lane 3
// (constant 0), leaving the 128-bit sum in X4 and k128 in X8 (for the
// 16-byte steps).
#define LANES \
	VMOVDQU64     klanes<>(SB), Z8; \
	VPCLMULQDQ    $0x00, Z8, Z0, Z4; \
	VPCLMULQDQ    $0x11, Z8, Z0, Z5; \
	VPXORQ        Z4, Z5, Z4; \
	VEXTRACTI64X4 $1, Z4, Y5; \
	VPXORQ        Y5, Y4, Y4; \
	VEXTRACTI32X4 $1, Y4, X5; \
	VPXORQ        X5, X4, X4; \
	VEXTRACTI32X4 $3, Z0, X5; \
	VPXORQ        X5, X4, X4; \
	VMOVDQU64     k128<>(SB), X8

// LDST loads 64 bytes at off(DI) into dst and stores them at off(R8): the
// fused copy of foldCopy.
#define LDST(off, dst) \
	VMOVDQU64 off(DI), dst; \
	VMOVDQU64 dst, off(R8)

// func fold(reg uint32, p *byte, n int, or *[64]byte) uint32
TEXT ·fold(SB), NOSPLIT, $0-36
	MOVL reg+0(FP), AX
	MOVQ p+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ or+24(FP), DX

	// The first 256 bytes (n >= 512 always), with the mask ORed into the
	// first 64 and the register XORed into the first 4, fill Z0-Z3.
	VMOVD     AX, X4
	VMOVDQU64 0(SI), Z0
	VPORQ     0(DX), Z0, Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VPXORQ    Z4, Z0, Z0
	CMPQ      CX, $1024
	JB        start4

	// Eight accumulators while at least 512 bytes remain after the first 512.
	VMOVDQU64 256(SI), Z4
	VMOVDQU64 320(SI), Z5
	VMOVDQU64 384(SI), Z6
	VMOVDQU64 448(SI), Z7
	ADDQ      $512, SI
	SUBQ      $512, CX
	VBROADCASTI32X4 k4096<>(SB), Z8

loop512:
	FOLD(Z8, Z0, Z16, 0(SI))
	FOLD(Z8, Z1, Z17, 64(SI))
	FOLD(Z8, Z2, Z18, 128(SI))
	FOLD(Z8, Z3, Z19, 192(SI))
	FOLD(Z8, Z4, Z20, 256(SI))
	FOLD(Z8, Z5, Z21, 320(SI))
	FOLD(Z8, Z6, Z22, 384(SI))
	FOLD(Z8, Z7, Z23, 448(SI))
	ADDQ $512, SI
	SUBQ $512, CX
	CMPQ CX, $512
	JAE  loop512

	// Fold the first four accumulators 2048 bits on, into the last four.
	EIGHTTOFOUR
	JMP loop256

start4:
	ADDQ      $256, SI
	SUBQ      $256, CX
	VBROADCASTI32X4 k2048<>(SB), Z8

loop256:
	CMPQ CX, $256
	JB   fold4
	FOLD(Z8, Z0, Z4, 0(SI))
	FOLD(Z8, Z1, Z5, 64(SI))
	FOLD(Z8, Z2, Z6, 128(SI))
	FOLD(Z8, Z3, Z7, 192(SI))
	ADDQ $256, SI
	SUBQ $256, CX
	JMP  loop256

fold4:
	FOURTOONE

loop64:
	CMPQ CX, $64
	JB   lanes
	FOLD(Z8, Z0, Z4, 0(SI))
	ADDQ $64, SI
	SUBQ $64, CX
	JMP  loop64

lanes:
	LANES

loop16:
	CMPQ CX, $16
	JB   done
	FOLD(X8, X4, X5, 0(SI))
	ADDQ $16, SI
	SUBQ $16, CX
	JMP  loop16

done:
	REDUCE
	MOVL       AX, ret+32(FP)
	VZEROUPPER
	RET

// func foldShort(reg uint32, p *byte, n int, or *[64]byte) uint32
//
// For input too short to fill fold's accumulators: one 128-bit
// accumulator, 16 bytes a step, the mask ORed into the first 64.
TEXT ·foldShort(SB), NOSPLIT, $0-36
	MOVL      reg+0(FP), AX
	MOVQ      p+8(FP), SI
	MOVQ      n+16(FP), CX
	MOVQ      or+24(FP), DX
	VMOVD     AX, X5
	VMOVDQU64 0(SI), X4
	VPORQ     0(DX), X4, X4
	VPXORQ    X5, X4, X4
	VMOVDQU64 k128<>(SB), X8
	ADDQ      $16, SI
	ADDQ      $16, DX
	SUBQ      $16, CX
	MOVQ      $3, BX // the mask's 16-byte blocks left

masked16:
	CMPQ      CX, $16
	JB        short
	TESTQ     BX, BX
	JZ        plain16
	VMOVDQU64 0(SI), X6
	VPORQ     0(DX), X6, X6
	FOLD(X8, X4, X5, X6)
	ADDQ      $16, SI
	ADDQ      $16, DX
	SUBQ      $16, CX
	DECQ      BX
	JMP       masked16

plain16:
	CMPQ CX, $16
	JB   short
	FOLD(X8, X4, X5, 0(SI))
	ADDQ $16, SI
	SUBQ $16, CX
	JMP  plain16

short:
	REDUCE
	MOVL AX, ret+32(FP)
	VZEROUPPER
	RET

// func foldCopy(reg uint32, p, ld, st *byte, n int, or *[64]byte) uint32
//
// fold of n bytes (a multiple of 16, at least minFast) of which the first
// 256 are at p and the rest at ld; those are also copied to st as they
// are read. The loops are fold's, each 64 bytes loaded into a register,
// stored and folded: the copy rides in the load and store ports the
// multiplies leave idle.
TEXT ·foldCopy(SB), NOSPLIT, $0-52
	MOVL reg+0(FP), AX
	MOVQ p+8(FP), SI
	MOVQ ld+16(FP), DI
	MOVQ st+24(FP), R8
	MOVQ n+32(FP), CX
	MOVQ or+40(FP), DX

	VMOVD     AX, X4
	VMOVDQU64 0(SI), Z0
	VPORQ     0(DX), Z0, Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VPXORQ    Z4, Z0, Z0
	SUBQ      $256, CX
	CMPQ      CX, $768
	JB        cstart4

	LDST(0, Z4)
	LDST(64, Z5)
	LDST(128, Z6)
	LDST(192, Z7)
	ADDQ $256, DI
	ADDQ $256, R8
	SUBQ $256, CX
	VBROADCASTI32X4 k4096<>(SB), Z8

cloop512:
	LDST(0, Z24)
	LDST(64, Z25)
	LDST(128, Z26)
	LDST(192, Z27)
	LDST(256, Z28)
	LDST(320, Z29)
	LDST(384, Z30)
	LDST(448, Z31)
	FOLD(Z8, Z0, Z16, Z24)
	FOLD(Z8, Z1, Z17, Z25)
	FOLD(Z8, Z2, Z18, Z26)
	FOLD(Z8, Z3, Z19, Z27)
	FOLD(Z8, Z4, Z20, Z28)
	FOLD(Z8, Z5, Z21, Z29)
	FOLD(Z8, Z6, Z22, Z30)
	FOLD(Z8, Z7, Z23, Z31)
	ADDQ $512, DI
	ADDQ $512, R8
	SUBQ $512, CX
	CMPQ CX, $512
	JAE  cloop512

	EIGHTTOFOUR
	JMP cloop256

cstart4:
	VBROADCASTI32X4 k2048<>(SB), Z8

cloop256:
	CMPQ CX, $256
	JB   cfold4
	LDST(0, Z24)
	LDST(64, Z25)
	LDST(128, Z26)
	LDST(192, Z27)
	FOLD(Z8, Z0, Z4, Z24)
	FOLD(Z8, Z1, Z5, Z25)
	FOLD(Z8, Z2, Z6, Z26)
	FOLD(Z8, Z3, Z7, Z27)
	ADDQ $256, DI
	ADDQ $256, R8
	SUBQ $256, CX
	JMP  cloop256

cfold4:
	FOURTOONE

cloop64:
	CMPQ CX, $64
	JB   clanes
	LDST(0, Z24)
	FOLD(Z8, Z0, Z4, Z24)
	ADDQ $64, DI
	ADDQ $64, R8
	SUBQ $64, CX
	JMP  cloop64

clanes:
	LANES

cloop16:
	CMPQ CX, $16
	JB   cdone
	VMOVDQU64 0(DI), X6
	VMOVDQU64 X6, 0(R8)
	FOLD(X8, X4, X5, X6)
	ADDQ $16, DI
	ADDQ $16, R8
	SUBQ $16, CX
	JMP  cloop16

cdone:
	REDUCE
	MOVL       AX, ret+48(FP)
	VZEROUPPER
	RET
