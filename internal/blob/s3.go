package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// minPartSize is S3's smallest multipart part.
const minPartSize = 5 << 20

// S3Config names a bucket and how to reach it.
type S3Config struct {
	Bucket   string
	Endpoint string // the server's base URL; "" for AWS itself
	Region   string // "" means us-east-1
	Prefix   string // keys live under Prefix/ in the bucket; "" for the bucket's root
	// PartSize is the multipart upload's part size (at least 5 MiB); 0 means 8 MiB.
	PartSize int64
}

// S3 keeps blobs in an S3 bucket, path-style, with multipart uploads (a part set is
// completed, and so visible, only once every part arrived; a failed upload is aborted) and
// ranged reads.
type S3 struct {
	cfg    S3Config
	client *s3.Client
	up     *transfermanager.Client
}

var _ Store = (*S3)(nil)

// OpenS3 connects to the bucket, with credentials from the standard AWS environment
// variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) or shared config,
// and checks that it can be reached.
func OpenS3(ctx context.Context, c S3Config) (*S3, error) {
	if c.Bucket == "" {
		return nil, fmt.Errorf("%w: s3: no bucket named", ErrInvalid)
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.PartSize == 0 {
		c.PartSize = 8 << 20
	}
	if c.PartSize < minPartSize {
		return nil, fmt.Errorf("%w: s3: part size %d under the minimum %d", ErrInvalid, c.PartSize, minPartSize)
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(c.Region))
	if err != nil {
		return nil, fmt.Errorf("blob: s3 config: %w", err)
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		o.UsePathStyle = true
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		// S3-compatible servers do not all speak the newest checksum defaults.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	// A failed multipart upload is aborted (on a fresh context when the caller's ended), so
	// it leaves no parts behind.
	s := &S3{cfg: c, client: client, up: transfermanager.New(client, func(o *transfermanager.Options) {
		o.PartSizeBytes = c.PartSize
		o.MultipartUploadThreshold = c.PartSize
		o.FailTimeout = 30 * time.Second
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
	})}
	if _, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(c.Bucket)}); err != nil {
		return nil, fmt.Errorf("blob: s3 bucket %s at %s: %w", c.Bucket, c.Endpoint, err)
	}
	return s, nil
}

func (s *S3) object(key string) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	if s.cfg.Prefix == "" {
		return key, nil
	}
	return s.cfg.Prefix + "/" + key, nil
}

// notFound reports whether err is S3's answer for a missing object.
func notFound(err error) bool {
	var re *awshttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound
}

// Put uploads r; parts of PartSize go up in parallel and become the object only when the
// upload completes.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	obj, err := s.object(key)
	if err != nil {
		return err
	}
	// A reader shorter or longer than announced must fail, not publish a cut blob.
	counted := &countingReader{r: r, limit: max(size, -1)}
	in := &transfermanager.UploadObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(obj), Body: counted}
	if _, err := s.up.UploadObject(ctx, in); err != nil {
		return fmt.Errorf("blob: put %s: %w", key, err)
	}
	return nil
}

// countingReader fails a read that goes past limit bytes (when limit >= 0), and an EOF that
// comes before them, so a Put of the wrong length is aborted rather than completed.
type countingReader struct {
	r     io.Reader
	n     int64
	limit int64 // -1: unknown
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.limit >= 0 {
		if c.n > c.limit {
			return n, fmt.Errorf("%w: more than the %d bytes announced", ErrInvalid, c.limit)
		}
		if errors.Is(err, io.EOF) && c.n < c.limit {
			return n, fmt.Errorf("%w: %d bytes read, %d announced", ErrInvalid, c.n, c.limit)
		}
	}
	return n, err
}

// Get reads the whole object.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return s.GetRange(ctx, key, 0, -1)
}

// GetRange reads n bytes from off with an HTTP range request.
func (s *S3) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	obj, err := s.object(key)
	if err != nil {
		return nil, err
	}
	if off < 0 {
		return nil, fmt.Errorf("%w: offset %d", ErrInvalid, off)
	}
	in := &s3.GetObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(obj)}
	switch {
	case n == 0:
		return io.NopCloser(strings.NewReader("")), nil
	case n > 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	case off > 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-", off))
	}
	out, err := s.client.GetObject(ctx, in)
	if notFound(err) {
		return nil, fmt.Errorf("blob %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("blob: get %s: %w", key, err)
	}
	return out.Body, nil
}

// Stat asks for the object's head.
func (s *S3) Stat(ctx context.Context, key string) (Info, error) {
	obj, err := s.object(key)
	if err != nil {
		return Info{}, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(obj)})
	if notFound(err) {
		return Info{}, fmt.Errorf("blob %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return Info{}, fmt.Errorf("blob: stat %s: %w", key, err)
	}
	return Info{Key: key, Size: aws.ToInt64(out.ContentLength), ModTime: aws.ToTime(out.LastModified), ETag: aws.ToString(out.ETag)}, nil
}

// Delete removes the object; S3 answers a missing one as deleted.
func (s *S3) Delete(ctx context.Context, key string) error {
	obj, err := s.object(key)
	if err != nil {
		return err
	}
	if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(obj)}); err != nil && !notFound(err) {
		return fmt.Errorf("blob: delete %s: %w", key, err)
	}
	return nil
}

// List pages through the objects under prefix.
func (s *S3) List(ctx context.Context, prefix string) ([]Info, error) {
	full := prefix
	if s.cfg.Prefix != "" {
		full = s.cfg.Prefix + "/" + prefix
	}
	var out []Info
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: aws.String(s.cfg.Bucket), Prefix: aws.String(full)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("blob: list %s: %w", prefix, err)
		}
		for _, o := range page.Contents {
			key := aws.ToString(o.Key)
			if s.cfg.Prefix != "" {
				key = strings.TrimPrefix(key, s.cfg.Prefix+"/")
			}
			out = append(out, Info{Key: key, Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified), ETag: aws.ToString(o.ETag)})
		}
	}
	return out, nil
}
