// Glow's LeNet-MNIST example on a glowpy bundle compiled from a Caffe2 net, static API.
//
// The bundle is compiled from a Caffe2 predict/init pair with
//   model-compiler -model=LENET_DIR -model-input=data,float,[1,1,28,28]
//                  -network-name=lenet_mnist -emit-bundle=BUNDLE
// The net reads `data` [1,1,28,28] (pixel values 0..255, white digit on black, as MNIST) and
// writes `fc3` (the 10 logits) and `softmax` (their probabilities). The constant weights are
// compiled into the program from lenet_mnist.weights.txt; the mutable and activation regions are
// static arrays sized by the header's macros.
//
// usage: lenet_mnist IMAGE
// IMAGE is a 28x28 image given as a PGM (binary P5 or text P2, any maxval up to 65535, scaled
// to 0..255), as a file of 784 little-endian float32 values (3136 bytes), or as a text file of
// 784 numbers. Prints "class N", then "scores" and the 10 probabilities, then "logits".
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lenet_mnist.h"

#define PIXELS (28 * 28)

GLOW_MEM_ALIGN(LENET_MNIST_MEM_ALIGN)
static uint8_t constantWeight[LENET_MNIST_CONSTANT_MEM_SIZE] = {
#include "lenet_mnist.weights.txt"
};
GLOW_MEM_ALIGN(LENET_MNIST_MEM_ALIGN) static uint8_t mutableWeight[LENET_MNIST_MUTABLE_MEM_SIZE];
GLOW_MEM_ALIGN(LENET_MNIST_MEM_ALIGN) static uint8_t activations[LENET_MNIST_ACTIVATIONS_MEM_SIZE];

static unsigned char file[64 * 1024];

// The next PGM header integer, skipping whitespace and '#' comments; -1 if there is none.
static long pgm_int(size_t *pos, size_t n) {
  for (;;) {
    while (*pos < n && isspace(file[*pos])) (*pos)++;
    if (*pos < n && file[*pos] == '#') {
      while (*pos < n && file[*pos] != '\n') (*pos)++;
      continue;
    }
    break;
  }
  if (*pos >= n || !isdigit(file[*pos])) return -1;
  long v = 0;
  while (*pos < n && isdigit(file[*pos]) && v < 1000000) v = v * 10 + (file[(*pos)++] - '0');
  return v;
}

static int read_pgm(size_t n, float *out) {
  size_t pos = 2;
  int ascii = file[1] == '2';
  long w = pgm_int(&pos, n), h = pgm_int(&pos, n), maxval = pgm_int(&pos, n);
  if (w != 28 || h != 28 || maxval < 1 || maxval > 65535) return -1;
  int wide = maxval > 255;
  if (!ascii) {
    pos++;  // the single whitespace after maxval
    if (n - pos < (size_t)PIXELS * (wide ? 2 : 1)) return -1;
  }
  for (int i = 0; i < PIXELS; i++) {
    long v;
    if (ascii) {
      v = pgm_int(&pos, n);
    } else if (wide) {
      v = (long)file[pos] << 8 | file[pos + 1];  // 16-bit PGM samples are big-endian
      pos += 2;
    } else {
      v = file[pos++];
    }
    if (v < 0 || v > maxval) return -1;
    out[i] = (float)v * 255.0f / (float)maxval;
  }
  return 0;
}

static int read_text(size_t n, float *out) {
  file[n < sizeof file ? n : sizeof file - 1] = '\0';
  char *p = (char *)file, *end;
  for (int i = 0; i < PIXELS; i++) {
    out[i] = strtof(p, &end);
    if (end == p) return -1;
    p = end;
  }
  while (isspace((unsigned char)*p)) p++;
  return *p == '\0' ? 0 : -1;
}

static int read_image(const char *path, float *out) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t n = fread(file, 1, sizeof file - 1, f);
  int more = fgetc(f) != EOF;
  fclose(f);
  if (more) return -1;
  if (n >= 2 && file[0] == 'P' && (file[1] == '5' || file[1] == '2')) return read_pgm(n, out);
  int text = 1;
  for (size_t i = 0; i < n && text; i++)
    text = isspace(file[i]) || isdigit(file[i]) || strchr("+-.eE", file[i]) != NULL;
  if (text && n > 0) return read_text(n, out);
  if (n != PIXELS * sizeof(float)) return -1;
  for (int i = 0; i < PIXELS; i++) {  // little-endian float32, whatever the host's order
    uint32_t bits = (uint32_t)file[4 * i] | (uint32_t)file[4 * i + 1] << 8 |
                    (uint32_t)file[4 * i + 2] << 16 | (uint32_t)file[4 * i + 3] << 24;
    memcpy(&out[i], &bits, sizeof bits);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s IMAGE (28x28 PGM, 784 float32 values, or 784 numbers as text)\n",
            argv[0]);
    return 2;
  }
  float *input = (float *)GLOW_GET_ADDR(mutableWeight, LENET_MNIST_data);
  float *probs = (float *)GLOW_GET_ADDR(mutableWeight, LENET_MNIST_softmax);
  float *logits = (float *)GLOW_GET_ADDR(mutableWeight, LENET_MNIST_fc3);
  if (read_image(argv[1], input) != 0) {
    fprintf(stderr, "%s: not a 28x28 PGM, 784 float32 values or 784 numbers\n", argv[1]);
    return 1;
  }
  if (lenet_mnist(constantWeight, mutableWeight, activations) != GLOW_SUCCESS) {
    fprintf(stderr, "inference failed\n");
    return 1;
  }
  int best = 0;
  for (int i = 1; i < 10; i++)
    if (probs[i] > probs[best] || (probs[i] == probs[best] && logits[i] > logits[best])) best = i;
  printf("class %d\n", best);
  printf("scores");
  for (int i = 0; i < 10; i++) printf(" %.6g", probs[i]);
  printf("\nlogits");
  for (int i = 0; i < 10; i++) printf(" %.6g", logits[i]);
  printf("\n");
  return 0;
}
