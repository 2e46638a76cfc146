/*
 * softsync compute kernels (C99).
 *
 * Layouts. Every tensor is a row-major float array. Activations are NCHW:
 * element (n, c, h, w) of a tensor with C channels of H x W pixels is at
 * ((n*C + c)*H + h)*W + w; convolutions also take them channel-major
 * (CNHW: ((c*N + n)*H + h)*W + w, see ss_conv_shape). Convolution weights
 * are [OC][C][KH][KW], fully connected weights [out][in], biases one value
 * per output channel.
 *
 * Outputs are overwritten, never accumulated into, and must not alias
 * inputs unless a function says otherwise. Inputs are never modified.
 * Shapes are trusted: the caller (the Go package kernels) validates every
 * shape and length before calling, so these functions do no checking.
 *
 * GEMM goes through OpenBLAS's cblas_sgemm, loaded at run time with
 * ss_blas_load (dlopen): OpenBLAS chooses its kernel from the
 * OPENBLAS_CORETYPE environment variable once, when it is loaded, so the
 * caller sets that variable first. Nothing in this library links against
 * OpenBLAS.
 *
 * Indices are ptrdiff_t wherever a product of sizes can exceed INT_MAX.
 *
 * Threads. Every kernel that can split its work takes the number of
 * threads to split it over (threads, the caller included; <= 1 runs it
 * serially), next to its instruction-set level: the caller (the Go
 * package's engine) owns that count, so that callers with different
 * counts share the process without changing each other's. The non-GEMM
 * work runs on a process-wide pool that only grows (ss_threads_init);
 * GEMMs run on OpenBLAS's threads, whose count is process-wide too:
 * ss_sgemm sets it to the call's count when it differs from the last one
 * set (see ss_sgemm). Results never depend on the thread count, nor on
 * how concurrent callers share the pool: work is split by items (images,
 * planes, rows, tiles) whose sums run in a fixed order.
 */
#ifndef SOFTSYNC_H
#define SOFTSYNC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Activation layouts of a convolution (ss_conv_shape.layout). */
enum {
	SS_NCHW = 0,  /* image-major: plane (n, c) at (n*C + c)*H*W */
	SS_CNHW = 1   /* channel-major: plane (n, c) at (c*N + n)*H*W */
};

/* ss_conv_shape describes a batched 2-D convolution. Output size (Caffe):
 * OH = (H + 2*pad_h - kh)/stride_h + 1, likewise OW. layout orders x and
 * dx (C channels) and y and dy (OC channels) alike.
 *
 * Grouped convolutions run one group at a time: with groups = G > 1 the
 * shape describes one group, c input channels to oc output channels, of
 * tensors that hold G such blocks of channels side by side (x has G*c
 * channels, y G*oc), and every kernel addresses planes with the strides
 * of those whole tensors (ss_conv_planes in internal.h). Group g is then
 * the call on x + g*c*xc, w + g*oc*c*kh*kw, b + g*oc and y + g*oc*yc
 * (dx, dw, db likewise), where xc and yc are the strides between
 * channel planes: H*W and OH*OW in NCHW, N*H*W and N*OH*OW in CNHW. */
typedef struct {
	int n, c, h, w;          /* batch, input channels, height, width */
	int oc, kh, kw;          /* output channels, kernel height, width */
	int pad_h, pad_w;        /* zero padding on each side */
	int stride_h, stride_w;  /* >= 1 */
	int layout;              /* SS_NCHW or SS_CNHW */
	int groups;              /* blocks of c and oc channels in x and y; 0 or 1: one */
} ss_conv_shape;

/* Pooling modes of ss_pool_shape. */
enum { SS_POOL_MAX = 0, SS_POOL_AVG = 1 };

/* ss_pool_shape describes batched 2-D pooling with Caffe's ceil rounding:
 * OH = ceil((H + 2*pad_h - kh)/stride_h) + 1, minus one if the last window
 * would start inside the bottom padding; likewise OW. */
typedef struct {
	int mode;                /* SS_POOL_MAX or SS_POOL_AVG */
	int n, c, h, w;
	int kh, kw;
	int pad_h, pad_w;        /* < kh, kw */
	int stride_h, stride_w;
} ss_pool_shape;

/* LRN windows (ss_lrn_shape.region). */
enum {
	SS_LRN_WITHIN = 0,  /* Caffe's WITHIN_CHANNEL: size x size pixels of the plane */
	SS_LRN_ACROSS = 1   /* Caffe's ACROSS_CHANNELS: the pixel of size channels */
};

/* ss_lrn_shape describes Caffe's LRN: scale = k + alpha/norm * sum(x^2)
 * over a window centred on each element (zero padded, size odd), y = x *
 * scale^(-beta). Within a channel the window is size x size pixels of the
 * element's plane and norm = size^2; across channels it is the element's
 * pixel in channels c - size/2 .. c + size/2 of its image, norm = size. */
typedef struct {
	int n, c, h, w;
	int size;
	float alpha, beta, k;
	int region;              /* SS_LRN_WITHIN or SS_LRN_ACROSS */
} ss_lrn_shape;

/* ss_bn_shape describes batch normalisation per channel over n*hw
 * values: x is n x c x hw, channel ch's values the n runs of hw floats at
 * (i*c + ch)*hw. eps is added to the variance before its square root. */
typedef struct {
	int n, c;
	ptrdiff_t hw;
	float eps;
} ss_bn_shape;

/* ---- instruction sets (isa.c) ---- */

/* Instruction-set levels of the kernels' variants, lowest first. Every
 * kernel with variants takes the level to run as its first argument
 * (isa); a level above ss_isa_best() runs as ss_isa_best(), so any level
 * is safe to pass. The variants of one kernel give the same results up
 * to the rounding their contract allows (most are bit for bit equal).
 *   SS_ISA_GENERIC  portable C for the build's baseline target
 *   SS_ISA_AVX2     x86-64 AVX2, FMA and F16C
 *   SS_ISA_AVX512   x86-64 AVX-512 F, CD, BW, DQ and VL */
enum { SS_ISA_GENERIC = 0, SS_ISA_AVX2 = 1, SS_ISA_AVX512 = 2, SS_ISA_LEVELS = 3 };

/* ss_isa_best returns the highest level this build contains and the CPU
 * (with its operating system's support for the wider registers) runs. */
int ss_isa_best(void);

/* ---- OpenBLAS (blas.c) ---- */

/* ss_blas_load dlopens the OpenBLAS library at path and resolves the
 * symbols used here. It returns 0 on success; otherwise it writes a
 * message to err (errlen bytes, NUL terminated) and returns -1. Loading is
 * once per process: after a success, later calls return 0 at once. Not
 * safe to call concurrently. */
int ss_blas_load(const char *path, char *err, size_t errlen);
/* ss_blas_loaded reports whether ss_blas_load succeeded. */
int ss_blas_loaded(void);
/* ss_blas_path returns the file of the library ss_blas_load opened. */
const char *ss_blas_path(void);
/* openblas_get_config() and openblas_get_corename(). */
const char *ss_blas_config(void);
const char *ss_blas_corename(void);
/* ss_blas_set_threads sets OpenBLAS's thread count
 * (openblas_set_num_threads) to n (at least 1) unless it was last set to
 * n here already; ss_blas_threads returns openblas_get_num_threads(). */
void ss_blas_set_threads(int n);
int ss_blas_threads(void);

/* ss_sgemm computes C = alpha*op(A)*op(B) + beta*C, row-major, where
 * op(A) is m x k, op(B) is k x n, op(X) = X^T when trans_x is nonzero.
 * lda, ldb, ldc are the row strides of A, B, C as stored. It runs on
 * threads OpenBLAS threads: OpenBLAS's count is process-wide, so it
 * first calls ss_blas_set_threads(threads), which costs one comparison
 * when the count is unchanged. Two concurrent calls with different counts
 * may therefore run with each other's count (never a wrong result: only
 * the speed changes). Requires ss_blas_load. */
void ss_sgemm(int threads, int trans_a, int trans_b, int m, int n, int k, float alpha,
              const float *a, int lda, const float *b, int ldb,
              float beta, float *c, int ldc);

/* ss_gemm is ss_sgemm at instruction-set level isa: products with
 * alpha = 1, beta = 0 and one small dimension (C = A*B^T with 9 to 64
 * columns, C = A^T*B with 9 to 64 rows of A and B) whose large operand
 * holds a million floats or more run at level AVX2 on softsync's own
 * kernels, which read it where it lies (smallgemm.c); the rest, and any
 * product when memory for their copies is short, on OpenBLAS. */
void ss_gemm(int isa, int threads, int trans_a, int trans_b, int m, int n, int k, float alpha,
             const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* ss_sgemm_loop calls cblas_sgemm reps times (no transposes, packed
 * operands) on threads OpenBLAS threads (as ss_sgemm) and returns the
 * elapsed seconds: the raw C baseline that the Go API's overhead is
 * measured against. */
double ss_sgemm_loop(int threads, int m, int n, int k, const float *a, const float *b,
                     float *c, int reps);

/* ---- threads (parallel.c) ---- */

/* ss_threads_init grows the process-wide pool the non-GEMM kernels split
 * their work over to n threads (the caller included, at most 256),
 * starting worker threads as needed; it never stops any, so a smaller n
 * changes nothing. How many threads a call uses is its threads argument,
 * bounded by the pool's size. Workers sleep between jobs. Returns 0, or
 * -1 if a thread could not be started (calls then use fewer). */
int ss_threads_init(int n);
/* ss_threads returns the pool's size: its workers plus the caller. */
int ss_threads(void);
/* ss_parallel_max_parts returns the most threads any job the calling
 * thread ran since its previous call was split over (1 for a job run
 * serially, 0 if none ran), and starts counting again: tests check with it
 * that a kernel uses the threads it was given. */
int ss_parallel_max_parts(void);
/* ss_set_min_parallel_floats sets how much work (in floats touched) a
 * range needs before it is given to another thread (default 4096);
 * tests lower it to 1 to exercise the parallel paths on small shapes. */
void ss_set_min_parallel_floats(ptrdiff_t floats);

/* ---- im2col / col2im (im2col.c) ---- */

/* ss_im2col writes rows [r0, r1) of the column matrix of g images. x
 * holds them batch innermost (CHWN): pixel (c, h, w) of image n at
 * c*cs + (h*W + w)*g + n, cs >= H*W*g; with g = 1 that is one image whose
 * planes lie cs floats apart (cs = H*W for a plain CHW image). Row
 * r = (c*kh + i)*kw + j of col starts at col + r*ld and holds, at column
 * (oh*OW + ow)*g + n, the pixel (c, oh*stride_h - pad_h + i,
 * ow*stride_w - pad_w + j) of image n, or 0 outside the image. ld >=
 * OH*OW*g; a larger ld leaves room for other images' columns beside
 * these (the image-major layout of ss_conv_forward). */
void ss_im2col(const ss_conv_shape *s, int g, const float *x, ptrdiff_t cs, float *col, ptrdiff_t ld,
               ptrdiff_t r0, ptrdiff_t r1);

/* ss_col2im is the adjoint of ss_im2col for channels [c0, c1): it
 * overwrites those channels of x (CHWN, g images, planes cs floats apart)
 * with, at each pixel, the sum of the column entries ss_im2col would have
 * copied from it. The rows of a channel touch no other channel's pixels. */
void ss_col2im(const ss_conv_shape *s, int g, const float *col, ptrdiff_t ld, float *x, ptrdiff_t cs,
               int c0, int c1);

/* ---- convolution (conv.c) ---- */

/* Convolution methods. */
enum {
	SS_CONV_CHWN = 0,   /* GEMM per group, batch-innermost columns: column p*g + n */
	SS_CONV_IMAGE = 1,  /* GEMM per group, image-major columns: column n*P + p */
	SS_CONV_DIRECT = 2,   /* direct AVX2 or AVX-512 kernels (direct.c, direct512.c); stride 1 */
	SS_CONV_WINOGRAD = 3, /* Winograd F(2x2, 3x3) around 16 GEMMs (winograd.c); 3 x 3, stride 1, pad 0 or 1 */
	SS_CONV_WINOGRAD6 = 4, /* Winograd on 6 x 6 tiles around 36 GEMMs (winograd.c): F(4x4, 3x3) for 3 x 3
	                        * (pad 0 or 1), F(2x2, 5x5) for 5 x 5 (pad 0 to 2); stride 1 */
	SS_CONV_S2D = 5        /* space to depth, then a stride-1 method (s2d.c); stride > 1, one group */
};

/* ss_conv_direct_supported reports whether SS_CONV_DIRECT runs the shape
 * at level isa: stride 1 and a level of at least SS_ISA_AVX2 (after
 * ss_isa). */
int ss_conv_direct_supported(int isa, const ss_conv_shape *s);

/* ss_conv_winograd_supported reports whether method (SS_CONV_WINOGRAD or
 * SS_CONV_WINOGRAD6) runs the shape (at any level): stride 1, the same
 * padding on both axes, a 3 x 3 kernel padded by 0 or 1, or for
 * SS_CONV_WINOGRAD6 also a 5 x 5 kernel padded by 0 to 2. */
int ss_conv_winograd_supported(int method, const ss_conv_shape *s);

/* ss_conv_s2d_supported reports whether SS_CONV_S2D runs the shape (at
 * any level): a stride above 1 on either axis, one group. */
int ss_conv_s2d_supported(const ss_conv_shape *s);

/* Passes of a convolution, for ss_conv_pass_method. */
enum {
	SS_CONV_PASS_FORWARD = 0,
	SS_CONV_PASS_WGRAD = 1,  /* weight (and bias) gradient */
	SS_CONV_PASS_DGRAD = 2   /* input gradient */
};

/* ss_conv_pass_method returns the fastest method for one pass of the
 * shape at level isa: at level AVX2, space to depth for the strided
 * kernels over at most 4 input channels, at least twice the stride, that
 * it rewrites with at most 35% zero taps (forward and weight gradient; the input gradient where the
 * rewritten kernel runs on Winograd), Winograd for every pass of the
 * 3 x 3 shapes it runs with at least 64 input and 64 output channels
 * (on 6 x 6 tiles for output rows of 16 pixels or more, else on 4 x 4),
 * and of the 5 x 5 shapes with at least 48 input and 64 output channels
 * and output rows of 16 pixels or more (6 x 6 tiles); else
 * direct where supported, except at level AVX2 for narrow output planes
 * (OW < 16, not a multiple of 8) with C*kh*kw >= 1024 taps, and at level
 * AVX-512, for shapes of at least 1024 taps, on output
 * planes narrower than 16 pixels (input gradient; forward with at least
 * 192 output channels) or of fewer than 64 pixels (weight gradient);
 * else image-major GEMMs when output rows are long (OW >= 24: im2col
 * copies them whole and no transposes are needed), batch-innermost GEMMs
 * otherwise. ss_conv_backward runs one method for both gradients: a
 * caller whose two backward methods differ calls it twice, once without
 * dx and once without dw and db. */
int ss_conv_pass_method(int isa, const ss_conv_shape *s, int pass);

/* ss_conv_group returns how many images one GEMM should cover so that the
 * column matrix (C*kh*kw rows of group*OH*OW floats) stays within
 * budget floats, at least 1 and at most s->n. The direct method ignores
 * it. */
int ss_conv_group(const ss_conv_shape *s, ptrdiff_t budget);

/* ss_conv_workspace returns the number of floats of scratch memory
 * ss_conv_forward (backward = 0) or ss_conv_backward (backward = 1) needs
 * for a group size and method; for the direct method it depends on the
 * level and on the thread count threads, for Winograd on the thread
 * count. */
ptrdiff_t ss_conv_workspace(int isa, int threads, const ss_conv_shape *s, int group, int method,
                            int backward);

/* ss_conv_forward computes y = conv(x, w) + b for the batch with a method
 * (group images per GEMM for the GEMM methods) over threads threads; b
 * may be NULL. ws holds ws_len >= ss_conv_workspace(isa, threads, s,
 * group, method, 0) floats (with less, the direct method uses fewer
 * threads). */
void ss_conv_forward(int isa, int threads, const ss_conv_shape *s, int group, int method, const float *x,
                     const float *w, const float *b, float *y, float *ws, ptrdiff_t ws_len);

/* ss_conv_backward computes dw (overwritten, NULL to skip), db
 * (overwritten, NULL to skip) and dx (overwritten, NULL to skip) from x,
 * w and dy. ws holds
 * ws_len >= ss_conv_workspace(isa, threads, s, group, method, 1)
 * floats. */
void ss_conv_backward(int isa, int threads, const ss_conv_shape *s, int group, int method, const float *x,
                      const float *w, const float *dy, float *dx, float *dw,
                      float *db, float *ws, ptrdiff_t ws_len);

/* ---- direct convolution (direct.c) ---- */

/* ss_conv_direct_workspace is ss_conv_workspace for SS_CONV_DIRECT. */
ptrdiff_t ss_conv_direct_workspace(int isa, int threads, const ss_conv_shape *s, int backward);
/* ss_conv_direct_forward and ss_conv_direct_backward are ss_conv_forward
 * and ss_conv_backward for SS_CONV_DIRECT; they require
 * ss_conv_direct_supported(isa, s). */
void ss_conv_direct_forward(int isa, int threads, const ss_conv_shape *s, const float *x, const float *w,
                            const float *b, float *y, float *ws, ptrdiff_t ws_len);
void ss_conv_direct_backward(int isa, int threads, const ss_conv_shape *s, const float *x, const float *w,
                             const float *dy, float *dx, float *dw, float *db, float *ws, ptrdiff_t ws_len);

/* ---- Winograd convolution (winograd.c) ---- */

/* ss_conv_winograd_workspace is ss_conv_workspace for method
 * SS_CONV_WINOGRAD or SS_CONV_WINOGRAD6. */
ptrdiff_t ss_conv_winograd_workspace(int method, int threads, const ss_conv_shape *s, int backward);
/* ss_conv_winograd_forward and ss_conv_winograd_backward are
 * ss_conv_forward and ss_conv_backward for method SS_CONV_WINOGRAD or
 * SS_CONV_WINOGRAD6; they require ss_conv_winograd_supported(method, s)
 * and the workspace above. */
void ss_conv_winograd_forward(int method, int isa, int threads, const ss_conv_shape *s, const float *x,
                              const float *w, const float *b, float *y, float *ws);
void ss_conv_winograd_backward(int method, int isa, int threads, const ss_conv_shape *s, const float *x,
                               const float *w, const float *dy, float *dx, float *dw, float *db, float *ws);

/* ---- space-to-depth convolution (s2d.c) ---- */

/* ss_conv_s2d_workspace is ss_conv_workspace for SS_CONV_S2D. */
ptrdiff_t ss_conv_s2d_workspace(int isa, int threads, const ss_conv_shape *s, int group, int backward);
/* ss_conv_s2d_forward and ss_conv_s2d_backward are ss_conv_forward and
 * ss_conv_backward for SS_CONV_S2D; they require ss_conv_s2d_supported(s)
 * and the workspace above. */
void ss_conv_s2d_forward(int isa, int threads, const ss_conv_shape *s, int group, const float *x, const float *w,
                         const float *b, float *y, float *ws, ptrdiff_t ws_len);
void ss_conv_s2d_backward(int isa, int threads, const ss_conv_shape *s, int group, const float *x, const float *w,
                          const float *dy, float *dx, float *dw, float *db, float *ws, ptrdiff_t ws_len);

/* ---- pooling (pool.c) ---- */

/* ss_pool_out is Caffe's output size along one axis. */
int ss_pool_out(int in, int k, int pad, int stride);

/* ss_pool_forward pools x into y. For max pooling, mask receives for each
 * output the index h*W + w within its input plane of the first largest
 * input of the window (row-major order); for average pooling mask is
 * unused and may be NULL, and each output is the sum of the window's
 * pixels inside the image divided by the window's size clipped to the
 * padded image. */
void ss_pool_forward(int isa, int threads, const ss_pool_shape *s, const float *x, float *y, int *mask);

/* ss_pool_backward overwrites dx with the gradient of the pooling from
 * dy: through mask for max pooling, spread evenly over each window for
 * average pooling. Mask entries outside [0, H*W) are skipped and counted:
 * the count is returned (0 for a mask written by ss_pool_forward). */
ptrdiff_t ss_pool_backward(int isa, int threads, const ss_pool_shape *s, const float *dy, const int *mask,
                           float *dx);

/* ---- element-wise, LRN, FC, loss (layers.c) ---- */

/* ss_relu_forward: y = max(x, 0); y may alias x. */
void ss_relu_forward(int isa, int threads, ptrdiff_t n, const float *x, float *y);
/* ss_relu_backward: dx = y > 0 ? dy : 0; dx may alias dy. */
void ss_relu_backward(int isa, int threads, ptrdiff_t n, const float *y, const float *dy, float *dx);

/* ss_lrn_workspace returns the floats of scratch memory the LRN kernels
 * use over threads threads (per thread 2*H*W within channels, (size + 1)
 * times a block of at most 1024 pixels across channels); with
 * less, they use fewer threads (one thread's share is required). */
ptrdiff_t ss_lrn_workspace(int threads, const ss_lrn_shape *s);
/* ss_lrn_forward computes scale and y (see ss_lrn_shape); ws holds ws_len
 * floats (see ss_lrn_workspace). */
void ss_lrn_forward(int isa, int threads, const ss_lrn_shape *s, const float *x, float *y, float *scale,
                    float *ws, ptrdiff_t ws_len);
/* ss_lrn_backward computes dx from x, y, scale and dy:
 * dx_q = dy_q*scale_q^(-beta)
 *        - 2*alpha*beta/norm * x_q * sum_{p in window(q)} dy_p*y_p/scale_p.
 * ws holds ws_len floats (see ss_lrn_workspace). */
void ss_lrn_backward(int isa, int threads, const ss_lrn_shape *s, const float *x, const float *y,
                     const float *scale, const float *dy, float *dx, float *ws, ptrdiff_t ws_len);

/* ss_add: y = a + b; y may alias a or b. */
void ss_add(int isa, int threads, ptrdiff_t n, const float *a, const float *b, float *y);

/* ---- dropout (dropout.c) ---- */

/* ss_dropout writes y[i] = x[i]*m for i < n, where m is scale if element
 * i is kept and 0 if not: element i is kept when triple32((uint32)c ^ key) >=
 * threshold, with c = offset + i and key = (uint32)fmix64(fmix64(seed) +
 * (c >> 32)) (the definition, and the hashes, are in the Go package's
 * Dropout). The same call on the output gradient is the backward pass. y
 * may alias x. */
void ss_dropout(int isa, int threads, ptrdiff_t n, const float *x, float *y, unsigned long long seed,
                unsigned long long offset, unsigned threshold, float scale);

/* ---- batch normalisation (batchnorm.c) ---- */

/* ss_bn_forward_train writes each channel's mean and biased variance (its
 * n*hw values' sum of squares about the mean, divided by n*hw; both
 * summed in double precision) and y = (x - mean)*(gamma/sqrt(var + eps))
 * + beta. y may alias x. */
void ss_bn_forward_train(int isa, int threads, const ss_bn_shape *s, const float *x, const float *gamma,
                         const float *beta, float *y, float *mean, float *var);
/* ss_bn_forward_infer computes y as ss_bn_forward_train does, with the
 * given mean and var. y may alias x. */
void ss_bn_forward_infer(int isa, int threads, const ss_bn_shape *s, const float *x, const float *gamma,
                         const float *beta, const float *mean, const float *var, float *y);
/* ss_bn_backward computes, per channel, with is = 1/sqrt(var + eps) and
 * M = n*hw, dbeta = sum(dy), dgamma = is*sum(dy*(x - mean)) (summed in
 * double precision) and dx = (dy - dbeta/M - (x - mean)*is*dgamma/M) *
 * gamma*is (NULL to skip; may alias dy). */
void ss_bn_backward(int isa, int threads, const ss_bn_shape *s, const float *x, const float *gamma,
                    const float *mean, const float *var, const float *dy, float *dx, float *dgamma,
                    float *dbeta);

/* ss_fc_forward: y (n x out) = x (n x in) * w^T (w is out x in) + b; b may
 * be NULL. Batches of more than a few rows (or at level SS_ISA_GENERIC)
 * run an OpenBLAS GEMM on threads threads; the others run serially. */
void ss_fc_forward(int isa, int threads, int n, int in, int out, const float *x, const float *w,
                   const float *b, float *y);
/* ss_fc_backward: dw = dy^T x, db = column sums of dy (NULL to skip),
 * dx = dy w (NULL to skip), all overwritten. */
void ss_fc_backward(int isa, int threads, int n, int in, int out, const float *x, const float *w,
                    const float *dy, float *dx, float *dw, float *db);

/* ss_softmax_xent computes prob = softmax of each of the n rows of k
 * logits, returns the mean over rows of -log prob[label], and, unless
 * dlogits is NULL, dlogits = (prob - onehot(label))/n. Labels must lie in
 * [0, k). */
float ss_softmax_xent(int n, int k, const float *logits, const int *labels,
                      float *prob, float *dlogits);

/* Image resizing (csrc/image.c). An ss_img_axis is the filter of one axis
 * of a separable resize, made by the caller (the Go package kernels):
 * output pixel i (0 <= i < n) of the axis is the sum over t < taps of
 * coef[i*taps + t] * source pixel start[i] + t, in fixed point with bits
 * fraction bits (each output's coefficients sum to 1 << bits and lie in
 * 0 .. 32767), rounded to nearest and clamped to 0..255. start is
 * non-decreasing and every tap lies inside the source. A crop is an axis
 * of only the outputs wanted.
 *
 * Images are packed RGB bytes, row-major, no padding, sw x sh pixels.
 * The horizontal pass runs first over the source rows the vertical filter
 * needs (rounded to bytes, as PIL does), then the vertical pass. tmp holds
 * ss_img_tmp_size(sw, x, y) bytes of scratch. isa is the instruction-set
 * level to run (SS_ISA_*); every level computes the same bytes. */
typedef struct {
	int n, taps, bits;    /* outputs; coefficients per output; fraction bits */
	const int *start;     /* n first source pixels */
	const int16_t *coef;  /* n*taps values */
} ss_img_axis;

size_t ss_img_tmp_size(int sw, const ss_img_axis *x, const ss_img_axis *y);
/* dst: y->n rows of x->n RGB pixels. */
void ss_img_resize_u8(int isa, const unsigned char *src, int sw, int sh, const ss_img_axis *x, const ss_img_axis *y,
                      unsigned char *dst, void *tmp);
/* dst: 3 planes (R, G, B) of y->n x x->n floats; value of channel c at
 * output (j, i) = scale*p - mean[(c*y->n + j)*x->n + i] (mean may be NULL:
 * no subtraction; the product is rounded before the subtraction), where p
 * is the resized pixel (j, x->n-1-i) when mirror is set, else (j, i): the
 * mean is in output coordinates. */
void ss_img_resize_f32(int isa, const unsigned char *src, int sw, int sh, const ss_img_axis *x, const ss_img_axis *y,
                       int mirror, float scale, const float *mean, float *dst, void *tmp);

#ifdef __cplusplus
}
#endif

#endif /* SOFTSYNC_H */
