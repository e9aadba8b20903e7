// MNIST digit classifier on a glowpy bundle, static API.
//
// The bundle is compiled with
//   model-compiler -model=mnist8.onnx -network-name=mnist -emit-bundle=BUNDLE
// The constant weights are compiled into the program from mnist.weights.txt; the mutable and
// activation regions are static arrays sized by the header's macros. The input is a 28x28
// 8-bit PGM image (white digit on black, as MNIST), fed as pixel values 0..255.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mnist.h"

GLOW_MEM_ALIGN(MNIST_MEM_ALIGN)
static uint8_t constantWeight[MNIST_CONSTANT_MEM_SIZE] = {
#include "mnist.weights.txt"
};
GLOW_MEM_ALIGN(MNIST_MEM_ALIGN) static uint8_t mutableWeight[MNIST_MUTABLE_MEM_SIZE];
GLOW_MEM_ALIGN(MNIST_MEM_ALIGN) static uint8_t activations[MNIST_ACTIVATIONS_MEM_SIZE];

// Reads a binary (P5) PGM of 28x28 pixels with maxval 255.
static int read_pgm(const char *path, float *out) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  int w = 0, h = 0, maxval = 0;
  int ok = fscanf(f, "P5 %d %d %d", &w, &h, &maxval) == 3 && w == 28 && h == 28 && maxval == 255;
  fgetc(f);  // the single whitespace after maxval
  unsigned char px[28 * 28];
  ok = ok && fread(px, 1, sizeof px, f) == sizeof px;
  fclose(f);
  if (!ok) return -1;
  for (int i = 0; i < 28 * 28; i++) out[i] = (float)px[i];
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s IMAGE.pgm\n", argv[0]);
    return 2;
  }
  float *input = (float *)GLOW_GET_ADDR(mutableWeight, MNIST_Input3);
  float *scores = (float *)GLOW_GET_ADDR(mutableWeight, MNIST_Plus214_Output_0);
  if (read_pgm(argv[1], input) != 0) {
    fprintf(stderr, "%s: not a 28x28 8-bit PGM image\n", argv[1]);
    return 1;
  }
  if (mnist(constantWeight, mutableWeight, activations) != GLOW_SUCCESS) {
    fprintf(stderr, "inference failed\n");
    return 1;
  }
  int best = 0;
  for (int i = 1; i < 10; i++)
    if (scores[i] > scores[best]) best = i;
  printf("class %d\n", best);
  printf("scores");
  for (int i = 0; i < 10; i++) printf(" %.6g", scores[i]);
  printf("\n");
  return 0;
}
