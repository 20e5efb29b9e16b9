# Any supported Python (3.11, 3.12, 3.13): docker build --build-arg PYTHON_VERSION=3.13 .
ARG PYTHON_VERSION=3.11
FROM python:${PYTHON_VERSION}-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
# The runtime lock only: no test or lint tools in the image (docs/install.md).
COPY pyproject.toml requirements.lock ./
RUN pip install --no-cache-dir "uv==0.13.8" && uv pip install --system --no-cache -r requirements.lock
COPY . .
RUN pip install --no-cache-dir --no-deps . \
    && GPUPORTAL_DEBUG=true python manage.py collectstatic --noinput -v0
RUN useradd --system --uid 10001 gpuportal && mkdir -p /var/lib/gpuportal && chown gpuportal /var/lib/gpuportal
USER gpuportal
EXPOSE 8000
CMD ["gunicorn", "gpuportal.wsgi:application", "-c", "python:gpuportal.gunicorn_conf"]
