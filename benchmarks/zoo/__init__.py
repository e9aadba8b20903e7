"""A zoo of architectures built with onnx.helper in the op patterns PyTorch's exporter writes
(torchvision, Hugging Face), random weights from a fixed seed. Each builder takes
`perf=False` (a small size for tests/test_zoo.py) or `perf=True` (a realistic size for
benchmarks/zoo_perf.py) and returns (onnx.ModelProto, feeds {input name: array}).

    import zoo; model, feeds = zoo.ZOO["resnet18"]()

"""
from __future__ import annotations

from . import (audio, classic, dense, detection, generative, mobile, points, recurrent, text_tf,
               video, vision_tf)

ZOO = {
    "vgg_small": classic.vgg,
    "resnet18": classic.resnet18,
    "resnet50": classic.resnet50,
    "resnext": classic.resnext,
    "regnet_y": classic.regnet,
    "squeezenet": classic.squeezenet,
    "densenet": classic.densenet,
    "inception": classic.inception,
    "mobilenet_v1": mobile.mobilenet_v1,
    "mobilenet_v2": mobile.mobilenet_v2,
    "mobilenet_v3_small": mobile.mobilenet_v3_small,
    "efficientnet_b0": mobile.efficientnet_b0,
    "mnasnet": mobile.mnasnet,
    "shufflenet_v2": mobile.shufflenet_v2,
    "convnext": mobile.convnext,
    "unet": dense.unet,
    "fcn_resnet50": dense.fcn,
    "yolo": dense.yolo,
    "yolov8": dense.yolov8,
    "autoencoder": dense.autoencoder,
    "crnn": dense.crnn,
    "tcn": dense.tcn,
    "ds_cnn": dense.ds_cnn,
    "pointnet": points.pointnet,
    "nerf": points.nerf,
    "r2plus1d": video.r2plus1d,
    "x3d": video.x3d,
    "unet3d": video.unet3d,
    "vit_tiny": vision_tf.vit,
    "swin": vision_tf.swin,
    "mlp_mixer": vision_tf.mixer,
    "segformer": vision_tf.segformer,
    "bert_tiny": text_tf.bert,
    "gpt_decoder": text_tf.gpt,
    "lstm_classifier": recurrent.lstm_classifier,
    "gru_tagger": recurrent.gru_tagger,
    "crnn_lstm": recurrent.crnn_lstm,
    "tdnn": audio.tdnn,
    "hifigan": audio.hifigan,
    "whisper_encoder": audio.whisper_encoder,
    "conformer": audio.conformer,
    "wav2vec2": audio.wav2vec2,
    "efficientnet_v2": mobile.efficientnet_v2,
    "ghostnet": mobile.ghostnet,
    "pose": dense.pose,
    "diffusion_unet": generative.diffusion_unet,
    "esrgan": generative.esrgan,
    "deeplabv3": dense.deeplabv3,
    "llama": text_tf.llama,
    "mobilevit": vision_tf.mobilevit,
    "stylegan2": generative.stylegan2,
    "xception": mobile.xception,
    "hrnet": dense.hrnet,
    "ssdlite": detection.ssdlite,
    "bifpn": detection.bifpn,
    "detr": vision_tf.detr,
    "t5_encoder": text_tf.t5_encoder,
    "replknet": mobile.replknet,
    "espcn": generative.espcn,
    "fsrcnn": generative.fsrcnn,
    "srcnn": generative.srcnn,
    "alexnet": classic.alexnet,
}


def errors(got, expected) -> list[tuple[float, float]]:
    """Per output (max |got - expected|, tolerance): the issue's model tolerance
    1e-3 * max|expected| + 1e-4 (tests/test_zoo.py and benchmarks/zoo_perf.py)."""
    import numpy as np
    return [(float(np.abs(np.asarray(g, np.float64) - e).max()), 1e-3 * float(np.abs(e).max()) + 1e-4)
            for g, e in zip(got, expected)]
