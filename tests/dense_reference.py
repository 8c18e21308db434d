"""Dense reference computations the tests compare the library's sparse ones with, written out term by term."""

import math

import numpy as np


def dense_counts(rows, vocabulary):
    """(n, V) term counts of ``rows`` (tuples whose second field is a whitespace-separated text)."""
    index = {t: j for j, t in enumerate(vocabulary)}
    X = np.zeros((len(rows), len(vocabulary)))
    for i, row in enumerate(rows):
        for word in row[1].split():
            X[i, index[word]] += 1
    return X


def dense_tfidf(X, idf):
    """Sublinear tf-idf rows of unit length: ``(1 + log(tf / tf_min)) * idf``, each row scaled to norm 1."""
    out = np.zeros_like(X)
    for i in range(X.shape[0]):
        smallest = min((v for v in X[i] if v > 0), default=1.0)
        for j in range(X.shape[1]):
            if X[i, j] > 0:
                out[i, j] = (1 + math.log(X[i, j] / smallest)) * idf[j]
        norm = math.sqrt(float(out[i] @ out[i]))
        if norm:
            out[i] /= norm
    return out
