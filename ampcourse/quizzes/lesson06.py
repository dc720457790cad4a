"""Lesson 06 quiz."""

from ..quiz import Question


def questions() -> list[Question]:
    return [
        Question(
            "You time a CUDA step with time.perf_counter() before and after, without torch.cuda.synchronize(). "
            "You measure…",
            ["the step", "mostly the time to queue the kernels", "the step plus the compile time"],
            answer=1,
            why="CUDA calls return when the kernels are queued; only a synchronize (or CUDA events)"
                " waits for the work.",
        ),
        Question(
            "Ten timed runs: nine take 12 ms, one takes 200 ms (a hiccup). Which summary describes a typical step?",
            ["the mean, 30.8 ms", "the median, 12 ms", "the total divided by ten"],
            answer=1,
            why="The median ignores the one outlier; the mean (= total / 10) is dragged up by it.",
        ),
        Question(
            "With bf16 autocast and Adam, which memory gets smaller?",
            ["all of it halves", "only the activations saved for backward, and by less than half",
             "the optimizer state"],
            answer=1,
            why="Parameters, gradients and Adam's two moments stay FP32, and autocast even adds bf16 weight copies. "
                "Only the saved activations shrink, and not to half: some saved tensors stay float32 (the lesson "
                "measured the ratio above).",
        ),
        Question(
            "A datasheet lists BF16 Tensor Core: 1,979 TFLOPS* (* with sparsity). The peak for a normal dense "
            "matmul is…",
            ["1,979 TFLOPS", "about 990 TFLOPS", "about 3,958 TFLOPS"],
            answer=1,
            why="Sparse figures assume 2:4 structured sparsity and are twice the dense peak.",
        ),
        Question(
            "On a laptop CPU, bf16 autocast makes your training step slower than float32. What does that tell you "
            "about the same step on an A100?",
            ["it will be slower there too", "nothing: the speed-up depends on the hardware's low-precision units",
             "bf16 is broken in this torch"],
            answer=1,
            why="Autocast only pays off where the hardware runs the low dtype faster (Tensor Cores, AVX512-BF16/AMX); "
                "without them the casts are pure cost. Measure on the machine you will train on.",
            kind="transfer",
        ),
    ]
