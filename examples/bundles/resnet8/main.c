// CIFAR-10 classifier (MLPerf Tiny ResNet-8) on a glowpy bundle, dynamic API.
//
// The bundle is compiled with
//   model-compiler -model=mlperf_tiny_resnet8.onnx -network-name=resnet8 -bundle-api=dynamic -emit-bundle=BUNDLE
// Nothing about the model is known at compile time except the network name: region sizes come
// from resnet8_config, the weights are read from resnet8.weights.bin at run time, and the input
// and output placeholders are found by name in the bundle's symbol table.
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resnet8.h"

static const char *CLASSES[10] = {"airplane", "automobile", "bird", "cat", "deer",
                                  "dog", "frog", "horse", "ship", "truck"};

static const SymbolTableEntry *find_symbol(const BundleConfig *cfg, const char *name) {
  for (uint64_t i = 0; i < cfg->numSymbols; i++)
    if (strcmp(cfg->symbolTable[i].name, name) == 0) return &cfg->symbolTable[i];
  return NULL;
}

static uint8_t *alloc_region(uint64_t size, uint64_t align) {
  void *p = NULL;
  if (posix_memalign(&p, (size_t)align, size ? (size_t)size : 1) != 0) return NULL;
  return (uint8_t *)p;
}

static int read_exact(const char *path, uint8_t *dst, uint64_t size) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t n = fread(dst, 1, (size_t)size, f);
  int extra = fgetc(f) != EOF;
  fclose(f);
  return (n == size && !extra) ? 0 : -1;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s WEIGHTS.bin INPUT.bin (1x3x32x32 float32, NCHW)\n", argv[0]);
    return 2;
  }
  const BundleConfig *cfg = &resnet8_config;
  const SymbolTableEntry *in = find_symbol(cfg, "input_1");
  const SymbolTableEntry *out = find_symbol(cfg, "Identity");
  if (!in || !out || in->size != 3 * 32 * 32 || out->size != 10) {
    fprintf(stderr, "bundle has no input_1[3072] / Identity[10] placeholders\n");
    return 1;
  }
  uint8_t *constant = alloc_region(cfg->constantWeightVarsMemSize, cfg->alignment);
  uint8_t *mutable_ = alloc_region(cfg->mutableWeightVarsMemSize, cfg->alignment);
  uint8_t *activations = alloc_region(cfg->activationsMemSize, cfg->alignment);
  if (!constant || !mutable_ || !activations) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  if (read_exact(argv[1], constant, cfg->constantWeightVarsMemSize) != 0) {
    fprintf(stderr, "%s: expected %llu bytes of weights\n", argv[1],
            (unsigned long long)cfg->constantWeightVarsMemSize);
    return 1;
  }
  if (read_exact(argv[2], mutable_ + in->offset, in->size * sizeof(float)) != 0) {
    fprintf(stderr, "%s: expected %llu float32 values\n", argv[2], (unsigned long long)in->size);
    return 1;
  }
  if (resnet8(constant, mutable_, activations) != GLOW_SUCCESS) {
    fprintf(stderr, "inference failed\n");
    return 1;
  }
  const float *scores = (const float *)(mutable_ + out->offset);
  int best = 0;
  for (int i = 1; i < 10; i++)
    if (scores[i] > scores[best]) best = i;
  printf("class %d %s\n", best, CLASSES[best]);
  printf("scores");
  for (int i = 0; i < 10; i++) printf(" %.6g", scores[i]);
  printf("\n");
  free(constant);
  free(mutable_);
  free(activations);
  return 0;
}
