from setuptools import find_packages, setup

setup(
    name="pcem-spark",
    version="0.1.0",
    description="Path cost-sensitive naive Bayes and EM (WWW'19) for semi-supervised and "
                "weakly supervised hierarchical text classification on Apache Spark",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["pcem_spark", "pcem_spark.*"]),
    python_requires=">=3.11",
    # pyarrow (+ pandas, which PySpark's mapInArrow imports): blocks and
    # predictions cross between the JVM and Python as Arrow batches, so no
    # Python object is built per document. pandas < 3: PySpark 4 warns that it
    # does not fully support 3.x yet.
    install_requires=["pyspark>=4.0", "numpy>=1.24", "scipy>=1.10", "pyarrow>=11", "pandas>=2.2,<3"],
    # matplotlib only draws the experiment report's figures (Figures 2-3 and
    # the efficiency chart); the tests cover them, so the test extra has it.
    # scikit-learn only for scripts/bench_noregret.py's peers (LogisticRegression, MultinomialNB,
    # SelfTrainingClassifier): what users compare against, never a runtime dependency.
    extras_require={"plots": ["matplotlib>=3.7"],
                    "bench": ["scikit-learn>=1.3"],
                    "test": ["pytest>=7", "chispa>=0.10", "matplotlib>=3.7"]},
    entry_points={"console_scripts": ["pcem=pcem_spark.cli:main"]},
)
