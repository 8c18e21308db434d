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
    install_requires=["pyspark>=4.0", "numpy>=1.24", "scipy>=1.10"],
    extras_require={"test": ["pytest>=7", "chispa>=0.10"]},
    entry_points={"console_scripts": ["pcem=pcem_spark.cli:main"]},
)
