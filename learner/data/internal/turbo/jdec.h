/*
 * Decoding of a rectangle of a JPEG through libjpeg-turbo's libjpeg API
 * (jpeglib.h), included by turbo_cgo.go. TurboJPEG 2.x decodes whole
 * images only; the libjpeg API can leave out what a crop does not need:
 * jpeg_crop_scanline skips the inverse DCT, upsampling and colour
 * conversion of the columns outside (whole iMCU columns),
 * jpeg_skip_scanlines those of the rows above, and decoding stops after
 * the last row wanted (unless the caller asks for the whole stream). Upsampling is by replication (do_fancy_upsampling
 * off, TurboJPEG's TJFLAG_FASTUPSAMPLE), so no pixel depends on pixels
 * outside its iMCU and a rectangle holds the same pixels as the whole
 * image decoded. Errors longjmp back to the call; warnings are counted,
 * not printed.
 */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

typedef struct {
	struct jpeg_decompress_struct ci;
	struct jpeg_error_mgr em;
	jmp_buf jb;
	int warnings;
	char msg[JMSG_LENGTH_MAX];
	unsigned char *cmyk; /* a CMYK row batch, for CMYK and YCCK images */
	size_t cmyk_len;
} ss_jdec;

static void ss_jdec_error(j_common_ptr c)
{
	ss_jdec *d = (ss_jdec *)c->client_data;
	(*c->err->format_message)(c, d->msg);
	longjmp(d->jb, 1);
}

static void ss_jdec_emit(j_common_ptr c, int level)
{
	if (level < 0) {
		ss_jdec *d = (ss_jdec *)c->client_data;
		if (d->warnings++ == 0)
			(*c->err->format_message)(c, d->msg);
	}
}

static void ss_jdec_output(j_common_ptr c) { (void)c; }

static ss_jdec *ss_jdec_new(void)
{
	ss_jdec *d = calloc(1, sizeof *d);
	if (!d)
		return NULL;
	d->ci.err = jpeg_std_error(&d->em);
	d->em.error_exit = ss_jdec_error;
	d->em.emit_message = ss_jdec_emit;
	d->em.output_message = ss_jdec_output;
	d->ci.client_data = d;
	if (setjmp(d->jb)) {
		free(d);
		return NULL;
	}
	jpeg_create_decompress(&d->ci);
	return d;
}

static void ss_jdec_free(ss_jdec *d)
{
	jpeg_destroy_decompress(&d->ci);
	free(d->cmyk);
	free(d);
}

/* ss_jdec_end forgets the image (and the caller's buffer). */
static void ss_jdec_end(ss_jdec *d)
{
	jpeg_abort_decompress(&d->ci);
	if (d->ci.src) {
		d->ci.src->next_input_byte = NULL;
		d->ci.src->bytes_in_buffer = 0;
	}
}

/* ss_jdec_header reads the size and colour space (J_COLOR_SPACE) of the
 * JPEG in buf. It returns 0, or -1 with the message in d->msg. */
static int ss_jdec_header(ss_jdec *d, const unsigned char *buf, unsigned long len, int *w, int *h, int *cs)
{
	d->warnings = 0;
	d->msg[0] = 0;
	if (setjmp(d->jb)) {
		ss_jdec_end(d);
		return -1;
	}
	jpeg_mem_src(&d->ci, buf, len);
	jpeg_read_header(&d->ci, TRUE);
	*w = (int)d->ci.image_width;
	*h = (int)d->ci.image_height;
	*cs = (int)d->ci.jpeg_color_space;
	ss_jdec_end(d);
	return 0;
}

/* cmyk_to_rgb is turbo.CMYKToRGB (Adobe's inverted inks): R = C*K/255 as
 * Go's color.CMYKToRGB rounds it. */
static void cmyk_to_rgb(const unsigned char *s, unsigned char *o, int n)
{
	for (int i = 0; i < n; i++, s += 4, o += 3) {
		const unsigned k = s[3] * 0x101u;
		o[0] = (unsigned char)(s[0] * 0x101u * k / 0xffffu >> 8);
		o[1] = (unsigned char)(s[1] * 0x101u * k / 0xffffu >> 8);
		o[2] = (unsigned char)(s[2] * 0x101u * k / 0xffffu >> 8);
	}
}

/* cmyk_scratch makes d->cmyk hold 16 rows of w CMYK pixels; on failure
 * it ends the image and returns 0. */
static int cmyk_scratch(ss_jdec *d, JDIMENSION w)
{
	const size_t need = 4 * (size_t)w * 16;
	if (d->cmyk_len < need) {
		unsigned char *p = realloc(d->cmyk, need);
		if (!p) {
			snprintf(d->msg, sizeof d->msg, "out of memory");
			ss_jdec_end(d);
			return 0;
		}
		d->cmyk = p;
		d->cmyk_len = need;
	}
	return 1;
}

/* ss_jdec_rect decodes the JPEG in buf at scale num/8 (its size then sw x
 * sh, which the caller checked), rows [y0, y1) and at least columns
 * [x0, x1), as packed RGB into dst (3 * *ow bytes a row, y1 - y0 rows; dst
 * holds 3 * sw * (y1 - y0) bytes). The columns decoded are *ox ... *ox +
 * *ow - 1 (widened to whole iMCUs). With whole set, the rows after y1 are
 * decoded too (and dropped), so that the warnings of the whole stream are
 * counted (a truncated stream warns when its data runs out). fast selects the fast integer inverse DCT. It returns the
 * number of warnings (>= 0), or -1 with the message in d->msg. */
static int ss_jdec_rect(ss_jdec *d, const unsigned char *buf, unsigned long len, int num, int sw, int sh, int x0,
                        int y0, int x1, int y1, int whole, int fast, unsigned char *dst, int *ox, int *ow)
{
	struct jpeg_decompress_struct *ci = &d->ci;
	d->warnings = 0;
	d->msg[0] = 0;
	if (setjmp(d->jb)) {
		ss_jdec_end(d);
		return -1;
	}
	jpeg_mem_src(ci, buf, len);
	jpeg_read_header(ci, TRUE);
	const int cmyk = ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK;
	ci->out_color_space = cmyk ? JCS_CMYK : JCS_EXT_RGB;
	ci->scale_num = (unsigned)num;
	ci->scale_denom = 8;
	ci->do_fancy_upsampling = FALSE;
	ci->dct_method = fast ? JDCT_IFAST : JDCT_ISLOW;
	jpeg_start_decompress(ci);
	if ((int)ci->output_width != sw || (int)ci->output_height != sh) {
		snprintf(d->msg, sizeof d->msg, "decodes to %ux%u at %d/8, not %dx%d", ci->output_width, ci->output_height,
		         num, sw, sh);
		ss_jdec_end(d);
		return -1;
	}
	JDIMENSION xo = (JDIMENSION)x0, wo = (JDIMENSION)(x1 - x0);
	if (x0 > 0 || x1 < sw)
		jpeg_crop_scanline(ci, &xo, &wo);
	*ox = (int)xo;
	*ow = (int)wo;
	if (y0 > 0)
		jpeg_skip_scanlines(ci, (JDIMENSION)y0);
	const size_t stride = 3 * (size_t)wo;
	if (cmyk && !cmyk_scratch(d, wo))
		return -1;
	while ((int)ci->output_scanline < y1) {
		JSAMPROW rows[16];
		const int y = (int)ci->output_scanline, n = y1 - y < 16 ? y1 - y : 16;
		for (int r = 0; r < n; r++)
			rows[r] = cmyk ? d->cmyk + 4 * (size_t)wo * r : dst + (size_t)(y - y0 + r) * stride;
		const int got = (int)jpeg_read_scanlines(ci, rows, (JDIMENSION)n);
		if (cmyk)
			for (int r = 0; r < got; r++)
				cmyk_to_rgb(rows[r], dst + (size_t)(y - y0 + r) * stride, (int)wo);
	}
	if (whole && y1 < sh) { /* the rest, read over the scratch row batch */
		if (!cmyk_scratch(d, wo))
			return -1;
		while ((int)ci->output_scanline < sh) {
			JSAMPROW row = d->cmyk;
			jpeg_read_scanlines(ci, &row, 1);
		}
	}
	ss_jdec_end(d);
	return d->warnings;
}
