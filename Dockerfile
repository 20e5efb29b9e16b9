# Any supported Python (3.11, 3.12, 3.13): docker build --build-arg PYTHON_VERSION=3.13 .
# Optional extras, comma-separated: otel (tracing over OTLP), ldap (LDAP sign-in and the directory
# sync): docker build --build-arg EXTRAS=otel,ldap . (docs/install.md, "The image").
ARG PYTHON_VERSION=3.11
FROM python:${PYTHON_VERSION}-slim
ARG EXTRAS=""
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
# The runtime lock only: no test or lint tools in the image (docs/install.md). The development lock
# is copied as constraints for the extras: it pins their packages to the versions the suite tests,
# and installs nothing by itself.
COPY pyproject.toml requirements.lock requirements-dev.lock ./
RUN pip install --no-cache-dir "uv==0.13.8" && uv pip install --system --no-cache -r requirements.lock
# python-ldap is built from source against OpenLDAP's headers (Debian's libldap2-dev, libsasl2-dev).
RUN case ",${EXTRAS}," in *,ldap,*) \
        apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev libldap2-dev libsasl2-dev \
        && rm -rf /var/lib/apt/lists/* ;; esac
COPY . .
RUN if [ -n "${EXTRAS}" ]; then uv pip install --system --no-cache -c requirements-dev.lock ".[${EXTRAS}]"; \
    else pip install --no-cache-dir --no-deps .; fi \
    && GPUPORTAL_DEBUG=true python manage.py collectstatic --noinput -v0
RUN useradd --system --uid 10001 gpuportal && mkdir -p /var/lib/gpuportal && chown gpuportal /var/lib/gpuportal
USER gpuportal
EXPOSE 8000
CMD ["gunicorn", "gpuportal.wsgi:application", "-c", "python:gpuportal.gunicorn_conf"]
