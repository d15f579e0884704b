/* fields.c — the loader's output fields, made at open from cfg.fields:
 * each field's names and their aliases (the alternatives a raw sample
 * keeps), its decoder (AUTO by the first name's extension, or the GPU
 * plan's row for JPEG images under jpeg_decode GPU), its image options and
 * augmentation, and its row's shape; and their free at close. Moved out of
 * loader.c, which calls it from wds_loader_open. */
#include <stdlib.h>
#include <string.h>

#include "loader/handle.h"
#include "pipeline/gpu_plan.h"

void wds__fields_free(wds_loader *l) {
  for (size_t i = 0; i < l->nfields; i++) {
    for (size_t a = 0; a < l->fields[i].nalts; a++)
      free(l->fields[i].alts[a]);
    free(l->fields[i].alts);
    free(l->fields[i].name);
  }
  free(l->fields);
  free(l->wanted);
  l->fields = NULL;
  l->wanted = NULL;
}

/* The field takes JPEGs (jpg or jpeg among its names): under
 * WDS_JPEG_DECODE_GPU its rows are planned for the GPU decoder. */
static int takes_jpeg(const wds__out_field *of) {
  for (size_t a = 0; a < of->nalts; a++)
    if (strcmp(of->alts[a], "jpg") == 0 || strcmp(of->alts[a], "jpeg") == 0)
      return 1;
  return 0;
}

/* The images' augmentation and output of cfg (pipeline/augment.h). */
void wds__config_augment(const wds_loader_config *cfg, wds__augment *a) {
  memset(a, 0, sizeof *a);
  a->ratio_min = cfg->crop_ratio_min;
  a->ratio_max = cfg->crop_ratio_max;
  a->flip_prob = cfg->flip_prob;
  for (int k = 0; k < 2; k++) {
    a->jitter.brightness[k] = cfg->brightness[k];
    a->jitter.contrast[k] = cfg->contrast[k];
    a->jitter.saturation[k] = cfg->saturation[k];
    a->jitter.hue[k] = cfg->hue[k];
  }
  a->dtype = cfg->image_dtype;
  for (int c = 0; c < 3; c++) {
    a->mean[c] = cfg->normalize_mean[c];
    a->std[c] = cfg->normalize_std[c];
  }
}

int wds__fields_setup(wds_loader *l, const wds_loader_config *cfg,
                      wds__err *oe) {
  if (!cfg->fields || cfg->field_count == 0)
    return wds__fail(oe, WDS_ERR_INVALID,
                     "wds_loader_open: no output fields (e.g. "
                     "\"jpg;png:rgb:224,cls\")");
  if (cfg->field_count > 256)
    return wds__fail(oe, WDS_ERR_INVALID,
                     "wds_loader_open: %zu output fields (at most 256)",
                     cfg->field_count);
  l->fields = calloc(cfg->field_count, sizeof *l->fields);
  if (!l->fields)
    return wds__fail(oe, WDS_ERR_NOMEM, "out of memory");
  l->nfields = cfg->field_count;
  size_t total_alts = 0, gpu_fields = 0;
  for (size_t i = 0; i < cfg->field_count; i++) {
    const wds_field_spec *fs = &cfg->fields[i];
    wds__out_field *of = &l->fields[i];
    if (!fs->name || !*fs->name)
      return wds__fail(oe, WDS_ERR_INVALID,
                       "wds_loader_open: field %zu has no name", i);
    if (!(of->name = strdup(fs->name)))
      return wds__fail(oe, WDS_ERR_NOMEM, "out of memory");
    size_t n = 1;
    for (const char *p = fs->name; *p; p++)
      n += *p == ';';
    /* room for each name's alias (wds__ext_alias: "jpg" also matches
     * "jpeg"), appended after the names given */
    if (!(of->alts = calloc(2 * n, sizeof *of->alts)))
      return wds__fail(oe, WDS_ERR_NOMEM, "out of memory");
    const char *p = fs->name;
    for (size_t a = 0; a < n; a++) {
      const char *q = strchr(p, ';');
      size_t len = q ? (size_t)(q - p) : strlen(p);
      if (len == 0)
        return wds__fail(oe, WDS_ERR_INVALID,
                         "wds_loader_open: field \"%s\" has an empty "
                         "alternative",
                         fs->name);
      if (!(of->alts[a] = strndup(p, len)))
        return wds__fail(oe, WDS_ERR_NOMEM, "out of memory");
      for (char *c = of->alts[a]; *c; c++)
        if (*c >= 'A' && *c <= 'Z')
          *c = (char)(*c - 'A' + 'a');
      of->nalts++;
      p = q ? q + 1 : p + len;
    }
    for (size_t a = 0; a < n; a++) {
      const char *alias = wds__ext_alias(of->alts[a], strlen(of->alts[a]));
      int listed = 0;
      for (size_t b = 0; alias && b < of->nalts; b++)
        listed |= strcmp(of->alts[b], alias) == 0;
      if (alias && !listed && !(of->alts[of->nalts++] = strdup(alias)))
        return wds__fail(oe, WDS_ERR_NOMEM, "out of memory");
    }
    total_alts += of->nalts;
    of->def = fs->decode == WDS_DECODE_AUTO ? wds__decoder_for_ext(of->alts[0])
                                            : wds__decoder_get(fs->decode);
    if (!of->def)
      return wds__fail(oe, WDS_ERR_INVALID,
                       "wds_loader_open: field \"%s\": unknown decode %d",
                       fs->name, (int)fs->decode);
    of->opts.channels = fs->channels ? fs->channels : 3;
    of->opts.width = fs->width ? fs->width : cfg->image_size;
    of->opts.height = fs->height ? fs->height : cfg->image_size;
    of->opts.crop = cfg->crop;
    of->opts.scale_min = cfg->crop_scale_min;
    of->opts.scale_max = cfg->crop_scale_max;
    wds__config_augment(cfg, &of->opts.aug);
    wds__err e;
    if (of->def->check_opts && of->def->check_opts(&of->opts, &e) != WDS_OK)
      return wds__fail(oe, WDS_ERR_INVALID, "wds_loader_open: field \"%s\": %s",
                       fs->name, e.msg);
    if (cfg->jpeg_decode == WDS_JPEG_DECODE_GPU &&
        of->def->id == WDS_DECODE_IMAGE && takes_jpeg(of)) {
      of->def = &wds__image_gpu_plan_def;
      gpu_fields++;
    }
    of->def->row_shape(&of->opts, &of->row);
  }
  if (cfg->jpeg_decode == WDS_JPEG_DECODE_GPU && gpu_fields == 0)
    return wds__fail(oe, WDS_ERR_INVALID,
                     "wds_loader_open: jpeg_decode is GPU, but no image "
                     "field takes jpg or jpeg");
  for (size_t i = 0; i < l->nfields; i++)
    l->needs_decode |= !l->fields[i].def->passthrough;
  l->wanted = calloc(total_alts, sizeof *l->wanted);
  if (!l->wanted)
    return wds__fail(oe, WDS_ERR_NOMEM, "out of memory");
  for (size_t i = 0; i < l->nfields; i++)
    for (size_t a = 0; a < l->fields[i].nalts; a++)
      l->wanted[l->nwanted++] = l->fields[i].alts[a];
  return WDS_OK;
}

/* Collation's skips go through the loader's count, text and log. */
