# SPDX-License-Identifier: BSD-3-Clause
"""Image patches from scikit-learn's bundled sample images (real-data setting)."""
from __future__ import annotations

import numpy as np

from fedmm._validation import as_rng, check_int

__all__ = ["image_patches", "SAMPLE_IMAGES"]

#: Images shipped with scikit-learn (``sklearn.datasets.load_sample_image``).
SAMPLE_IMAGES = ("china.jpg", "flower.jpg")


def image_patches(
    n_patches: int = 5000,
    *,
    patch_size: int = 8,
    images: tuple[str, ...] | list[str] = SAMPLE_IMAGES,
    seed=None,
) -> np.ndarray:
    """Random grey-level patches of scikit-learn's sample images, normalized.

    The images are converted to grey levels in ``[0, 1]`` (mean of the RGB
    channels), ``n_patches`` square patches are drawn uniformly at random
    (split as evenly as possible between the images), flattened, and
    normalized as in scikit-learn's dictionary-learning examples: every pixel
    position (feature) is centered and scaled to unit standard deviation
    over the drawn patches.

    Parameters
    ----------
    n_patches : int
        Number of patches ``N``.
    patch_size : int
        Side of a patch in pixels; ``p = patch_size²`` features.
    images : sequence of str
        Names accepted by :func:`sklearn.datasets.load_sample_image`.
    seed : int, Generator or None
        Source of randomness; the same seed gives the same patches.

    Returns
    -------
    X : ndarray of shape (N, patch_size**2), float64, C-ordered
        One patch per row (row-major pixels).

    Examples
    --------
    >>> import numpy as np
    >>> X = image_patches(500, seed=0)
    >>> X.shape, bool(np.allclose(X.mean(axis=0), 0.0)), bool(np.allclose(X.std(axis=0), 1.0))
    ((500, 64), True, True)
    """
    from sklearn.datasets import load_sample_image
    from sklearn.feature_extraction.image import extract_patches_2d

    n_patches = check_int(n_patches, "n_patches", low=2)
    patch_size = check_int(patch_size, "patch_size", low=1, high=64)
    if isinstance(images, (str, bytes)) or not hasattr(images, "__iter__"):
        raise TypeError(f"Expected 'images' to be a list or tuple of names in {SAMPLE_IMAGES!r}, "
                        f"got {type(images).__name__}")
    images = tuple(images)
    if not images:
        raise ValueError("Expected at least one name in 'images'")
    for name in images:
        if name not in SAMPLE_IMAGES:
            raise ValueError(f"Expected 'images' entries in {SAMPLE_IMAGES!r}, got {name!r}")
    rng = as_rng(seed, "seed")
    counts = np.full(len(images), n_patches // len(images))
    counts[: n_patches % len(images)] += 1
    blocks = []
    for name, count in zip(images, counts):
        if count == 0:
            continue
        grey = load_sample_image(name).astype(np.float64).mean(axis=2) / 255.0
        patches = extract_patches_2d(
            grey, (patch_size, patch_size), max_patches=int(count),
            random_state=int(rng.integers(2**31 - 1)),
        )
        blocks.append(patches.reshape(patches.shape[0], -1))
    X = np.concatenate(blocks, axis=0)
    X -= X.mean(axis=0)
    std = X.std(axis=0)
    X /= np.where(std > 0, std, 1.0)
    return np.ascontiguousarray(X)
